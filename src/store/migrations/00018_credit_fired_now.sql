-- A charge is one statement (docs/models.md, "Credits and budgets"): the ledger row, the period's
-- running total, the thresholds it crosses and their events. The upsert decides under the period
-- row's lock which thresholds this charge fires and keeps them here, so that the same statement
-- can write their events (RETURNING sees only the new row, not which thresholds were fired before).
alter table credit_periods add column fired_now integer[] not null default '{}';
