-- Private nearest users from DuckDB (docs/operations/nearest_users.md; Liang & Yi, 'Adaptive
-- Privacy Budgeting' (2026), Alg. 8).
--
-- Nearest users is multi-round: each round releases noisy distances of the users still in
-- play and drops the ones that are surely not among the k nearest, and a user's charge depends
-- on the round they were dropped at. A SQL function sees one batch at a time and cannot run
-- rounds across users, so there is no gp_ function or table macro for it (docs/sql.md): the
-- rounds run in Python and the result comes back as a relation.
--
-- Setup (Python):
--     import duckdb, gpframe as gp
--     con = duckdb.connect()
--     session = gp.Session("ledger.sqlite", budget=gp.CGP(rho=1e-2))
--     gp.duckdb.register(con, session)
-- and a table in one projected metre CRS (e.g. UTM 18N, EPSG:32618):
--     pings(user_id, ts, x, y)   one row per fix

-- 1. Nearest users reads ONE point per user (docs/ledger.md): pick it in SQL, here each user's last
-- fix.
CREATE OR REPLACE TEMP VIEW last_fix AS
SELECT user_id, arg_max(x, ts) AS x, arg_max(y, ts) AS y
FROM pings
GROUP BY user_id;

-- 2. In Python (charges rho=1e-3 per user at most; users dropped early pay less):
--     rel = gp.duckdb.nearest_users(con, "SELECT * FROM last_fix", user="user_id", x="x", y="y",
--                                   point=(500000.0, 4500000.0), k=2, rho=1e-3,
--                                   rounds=10, split="doubling")
--     con.register("gp_nearest", rel.to_arrow_table())
-- rel has the columns user_id, nearest_rank (1 = nearest) and error_m (the distance error bound
-- of every rank at confidence 1 - beta; 0 when elimination isolated exactly k users).

-- 3. Post-processing of released values only: the selected users with their rank.
SELECT nearest_rank, user_id, error_m
FROM gp_nearest
ORDER BY nearest_rank;
