-- Weak refs (docs/decisions/0031-weak-refs.md): a weak ref names its key
-- without keeping it, and is deleted with it.
ALTER TABLE refs ADD COLUMN weak INTEGER NOT NULL DEFAULT 0;

-- The registry's blob links, oci/<repo>/_blobs/<digest>, named the empty
-- blob so as to keep nothing: each becomes a weak ref to the blob its name
-- carries, or goes if that blob is no longer stored (a stale link). GLOB,
-- not LIKE: names are case-sensitive, and LIKE is not.
UPDATE refs SET key = substr(name, -71), weak = 1
WHERE key = 'sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'
  AND name GLOB 'oci/*/_blobs/sha256:*' AND substr(name, -79, 8) = '/_blobs/'
  AND substr(name, -71) IN (SELECT key FROM blobs);
DELETE FROM refs
WHERE key = 'sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855' AND weak = 0
  AND name GLOB 'oci/*/_blobs/sha256:*' AND substr(name, -79, 8) = '/_blobs/';
