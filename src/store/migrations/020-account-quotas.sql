-- Quotas per account (docs/operations.md "Accounts and usage"): the cards an account is guaranteed when
-- it asks (nominal), how many idle cards beyond that it may borrow (NULL: any), and an optional budget of
-- card-hours per calendar period (UTC day, week from Monday, month) that resets. A task over a limit of
-- its account or of any account above it waits with a reason naming the limit; it never starts.

ALTER TABLE accounts ADD COLUMN nominal_cards INTEGER CHECK (nominal_cards IS NULL OR nominal_cards BETWEEN 0 AND 100000);
ALTER TABLE accounts ADD COLUMN borrowing_limit INTEGER CHECK (borrowing_limit IS NULL OR borrowing_limit BETWEEN 0 AND 100000);
ALTER TABLE accounts ADD COLUMN budget_card_hours REAL CHECK (budget_card_hours IS NULL OR (budget_card_hours > 0 AND budget_card_hours <= 100000000));
ALTER TABLE accounts ADD COLUMN budget_period TEXT CHECK (budget_period IS NULL OR budget_period IN ('day', 'week', 'month'));
