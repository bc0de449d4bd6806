-- Lease-fenced records, their groups and tenants. Text keys are collated
-- "C": comparison is bytewise, so records list in the same order on every
-- engine.

-- A group scopes claiming; a save into a group not registered here fails.
CREATE TABLE record_groups (
    name       text COLLATE "C" PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Tenants are keyed per group. The group's default tenant ("" in the API)
-- is the row whose name is NULL: NULLs are distinct in UNIQUE (grp, name),
-- so the partial unique index is what makes "one default tenant per group"
-- a database guarantee. UNIQUE (grp, id) lets records reference a tenant
-- of their own group only.
CREATE TABLE record_tenants (
    id   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    grp  text COLLATE "C" NOT NULL REFERENCES record_groups (name),
    name text COLLATE "C",
    UNIQUE (grp, name),
    UNIQUE (grp, id)
);
CREATE UNIQUE INDEX record_tenants_one_default ON record_tenants (grp) WHERE name IS NULL;

-- One row per record. status has no CHECK: the vocabulary is append-only,
-- and a status added later is stored and listed without a schema change.
-- parked is record.Status.Parked() of status (terminal or suspended: never
-- claimable), computed by stead on every write.
--
-- A checkpoint (a save that keeps the lease) touches no indexed column, so
-- with room left on the page (fillfactor 80) it is a HOT update: no index
-- churn, and pruning reclaims old versions without waiting for vacuum.
-- Claims, renewals and releases move the row between the two claiming
-- indexes below. payload comes last.
CREATE TABLE records (
    id                text COLLATE "C" PRIMARY KEY,
    grp               text COLLATE "C" NOT NULL REFERENCES record_groups (name),
    tenant_id         bigint NOT NULL,
    status            text NOT NULL,
    parked            boolean NOT NULL,
    version           bigint NOT NULL,
    lease_owner       text NOT NULL,
    lease_incarnation bigint NOT NULL,
    lease_expiry      timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    payload           bytea NOT NULL,
    FOREIGN KEY (grp, tenant_id) REFERENCES record_tenants (grp, id)
) WITH (fillfactor = 80);

-- Claiming reads one group's unparked records through one of two indexes,
-- never another group's, and never a live lease: records without a lease
-- in id order, and leased records by expiry, whose expired prefix is the
-- recovery work and whose first entry is when the next lease lapses.
--
-- Their ids are collated "POSIX": byte order, as "C", but a collation no
-- other index has, so that the claiming queries' ORDER BY id COLLATE
-- "POSIX" can only be served by these indexes. Ordered by plain id, a plan
-- may walk the primary key instead, filtering: the planner prefers that
-- when its statistics say most records are unleased (after a burst of
-- inserts, before the next ANALYZE), and each claim then reads past every
-- record claimed since.
CREATE INDEX records_unleased ON records (grp, id COLLATE "POSIX") WHERE NOT parked AND lease_owner = '';
CREATE INDEX records_leased ON records (grp, lease_expiry, id COLLATE "POSIX") WHERE NOT parked AND lease_owner <> '';
