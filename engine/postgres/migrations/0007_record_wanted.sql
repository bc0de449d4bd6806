-- A save that makes a record claimable notifies its group's waiters only
-- while the group is wanted: a waiter that listens marks the group wanted
-- until a minute or so ahead, and renews the mark while it waits
-- (docs/decisions/0020-record-notify-when-wanted.md). NULL: never wanted.
ALTER TABLE record_groups ADD COLUMN wanted_until timestamptz;
