SELECT r.id, r.grp, t.name, r.status, r.version, r.lease_owner, r.lease_incarnation, r.lease_expiry, r.updated_at, r.payload
FROM "St""ead. sch;ema-ñ".records r JOIN "St""ead. sch;ema-ñ".record_tenants t ON t.id = r.tenant_id
WHERE r.id = $1
