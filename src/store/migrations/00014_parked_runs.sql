-- Runs parked on a wait or a person's input keep `wake_at` set and are left out of the claim query's
-- index: the claim reads only runs a worker can take now, however many are parked (ten thousand runs
-- waiting for input cost the polling workers nothing). A parked run is made claimable again by
-- clearing `wake_at`: its timer, a sweep of the due ones, or the input it waited for.
drop index if exists runs_claimable_idx;
create index runs_claimable_idx on runs (created_at) where status = 'running' and wake_at is null;
-- The sweep of parked runs whose time has come.
create index runs_parked_idx on runs (wake_at) where status = 'running' and wake_at is not null;
