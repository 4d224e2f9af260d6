-- A webhook trigger's URL carries a token of its own (docs/triggers.md, "Webhooks"): its id is no
-- credential. Compared in constant time; kept readable because the trigger answers its url. The
-- triggers already there get one now (two v4 UUIDs: 244 random bits), so their old URL (/v1/hooks/<id>)
-- stops working and the new one is the trigger's url.
alter table triggers add column hook_token text;
update triggers set hook_token = replace(gen_random_uuid()::text, '-', '') || replace(gen_random_uuid()::text, '-', '')
where type = 'webhook';
alter table triggers add constraint triggers_hook_token_check check ((type = 'webhook') = (hook_token is not null));
