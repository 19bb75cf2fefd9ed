-- Private per-cell mean and variance in DuckDB after a Clip-User plan
-- (docs/operations/grid_stats.md; Rameshwar & Tandon, 'On Improving the Composition Privacy Loss in
-- Differential Privacy for Fixed Estimation Error' (2024), Alg. 1, Prop. V.1, eq. (15)).
--
-- Setup (Python):
--     import duckdb, gpframe as gp
--     con = duckdb.connect()
--     session = gp.Session("ledger.sqlite", central=gp.DP(epsilon=5.0))
--     gp.duckdb.register(con, session)
--     plan = gp.duckdb.clip_user(con, "pings", user="vessel", cell="cell", value="speed",
--                                bounds=(0, 30), epsilon=0.5, occupancy="public")
-- clip_user wrote the TEMP view gp_grid_input(user_id, cell, value, ord, rid) over "pings", the
-- retention table gp_retention(user_id, cell, cell_idx, r), the planned occupancy
-- gp_occupancy(user_id, cell, m) and gp_grid_params(plan_id, L, q, T). This query then:
--   0. re-counts the table per (user, cell); if any pair differs from the planned occupancy
--      (the table changed after planning), gp_grid_release refuses to run (fail closed);
--   1. keeps, in every (user, cell), the first r rows in the canonical order (ord, then rowid);
--   2. snaps each kept value to the integer k = round_even((value - L) / q), clamped to [0, T]
--      (the same IEEE operations and half-to-even rounding as the Python path), and sums k and
--      k*k as integers: exact and independent of the order in which parallel threads add them
--      (a DOUBLE sum is not; the sensitivity W*r*/r must hold for the statistic actually computed);
--   3. calls gp_grid_release once per cell: noise for the mean and the 1/r variance, and the
--      charge epsilon x 2 per kept user per cell on the Session, before the values are returned.
-- Run it once per plan: every evaluation draws fresh noise and is charged again.
WITH ranked AS (
    SELECT i.cell, i.value, ret.cell_idx, ret.r,
           row_number() OVER (PARTITION BY i.user_id, i.cell ORDER BY i.ord, i.rid) AS rn
    FROM gp_grid_input AS i
    JOIN gp_retention AS ret ON i.user_id = ret.user_id AND i.cell = ret.cell
),
kept AS (
    SELECT ranked.cell, ranked.cell_idx,
           least(greatest(CAST(round_even((ranked.value - p.L) / p.q, 0) AS BIGINT), 0), p.T) AS k
    FROM ranked, gp_grid_params AS p
    WHERE ranked.rn <= ranked.r
),
sums AS (
    SELECT cell, cell_idx, count(*) AS n,
           CAST(sum(k) AS HUGEINT) AS s1, CAST(sum(k * k) AS HUGEINT) AS s2
    FROM kept
    GROUP BY cell, cell_idx
),
guard AS (
    SELECT count(*) AS mismatched
    FROM (SELECT user_id, cell, count(*) AS m FROM gp_grid_input GROUP BY user_id, cell) AS d
    FULL OUTER JOIN gp_occupancy AS o ON d.user_id = o.user_id AND d.cell = o.cell
    WHERE d.m IS DISTINCT FROM o.m
),
released AS (
    SELECT s.cell, s.n AS n_kept,
           gp_grid_release(p.plan_id, s.cell_idx, s.n, CAST(s.s1 AS BIGINT),
                           CAST(s.s2 AS BIGINT), g.mismatched) AS rel
    FROM sums AS s, gp_grid_params AS p, guard AS g
)
SELECT cell, n_kept, rel.mean, rel.variance, rel.variance_unbiased, rel.mean_error,
       rel.variance_error
FROM released
ORDER BY cell;
