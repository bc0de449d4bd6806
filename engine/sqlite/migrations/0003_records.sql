-- Lease-fenced records, their groups and tenants.

-- A group scopes claiming; a save into a group not registered here fails.
CREATE TABLE record_groups (
    name TEXT NOT NULL PRIMARY KEY
) WITHOUT ROWID;

-- Tenants are keyed per group. The group's default tenant ("" in the API)
-- is the row whose name is NULL: NULLs are distinct in UNIQUE (grp, name),
-- so the partial unique index is what makes "one default tenant per group"
-- a database guarantee. UNIQUE (grp, id) lets records reference a tenant
-- of their own group only.
CREATE TABLE record_tenants (
    id   INTEGER PRIMARY KEY,
    grp  TEXT NOT NULL REFERENCES record_groups (name),
    name TEXT,
    UNIQUE (grp, name),
    UNIQUE (grp, id)
);
CREATE UNIQUE INDEX record_tenants_one_default ON record_tenants (grp) WHERE name IS NULL;

-- One row per record. status has no CHECK: the vocabulary is append-only,
-- and a status added later is stored and listed without a schema change.
-- parked is record.Status.Parked() of status (terminal or suspended: never
-- claimable), computed by stead on every write. Times are microseconds
-- since the Unix epoch. payload comes last, so reading the other columns
-- stops before it.
CREATE TABLE records (
    id                TEXT    NOT NULL PRIMARY KEY,
    grp               TEXT    NOT NULL REFERENCES record_groups (name),
    tenant_id         INTEGER NOT NULL,
    status            TEXT    NOT NULL,
    parked            INTEGER NOT NULL,
    version           INTEGER NOT NULL,
    lease_owner       TEXT    NOT NULL,
    lease_incarnation INTEGER NOT NULL,
    lease_expiry      INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    payload           BLOB    NOT NULL,
    FOREIGN KEY (grp, tenant_id) REFERENCES record_tenants (grp, id)
);

-- Claiming reads one group's unparked records through one of two indexes,
-- never another group's, and never a live lease: records without a lease
-- in id order, and leased records by expiry, whose expired prefix is the
-- recovery work and whose first entry is when the next lease lapses.
CREATE INDEX records_unleased ON records (grp, id) WHERE parked = 0 AND lease_owner = '';
CREATE INDEX records_leased ON records (grp, lease_expiry, id) WHERE parked = 0 AND lease_owner <> '';
