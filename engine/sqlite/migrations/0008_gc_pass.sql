-- gc_pass: the staging pass's durable cursor (docs/decisions/0021-gc-at-scale.md).
-- after is the last key the pass covered ('' when the next range starts a
-- new pass); started is when the pass began, in Unix microseconds (NULL:
-- staging never ran).
CREATE TABLE gc_pass (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    after   TEXT    NOT NULL,
    started INTEGER
);
INSERT INTO gc_pass (id, after) VALUES (1, '');
