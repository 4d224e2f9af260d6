-- Who issued each API key: the user of the key that created it (null for the bootstrap root key).
-- A key issued for someone else acts as that user, so the audit trail of its writes names the issuer
-- too (docs/audit.md). `created_by` (the issuing key's id) was already kept; the user is copied here
-- because the issuing key may be revoked and its row is not needed on every authentication.
alter table api_keys add column issued_by text;
update api_keys k set issued_by = i.user_id from api_keys i where i.id = k.created_by;

alter table audit_log add column issued_by text;
