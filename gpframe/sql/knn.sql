-- Private k nearest neighbours per user in DuckDB with gp_knn (concentrated-geo-privacy.md §7;
-- issue 8).
--
-- Setup (Python):
--     import duckdb, gpframe as gp
--     from gpframe.duckdb_knn import register_knn
--     con = duckdb.connect()
--     session = gp.Session("ledger.sqlite", budget=gp.CGP(rho=1e-3))
--     register_knn(con, session)
-- and a table in one projected metre CRS (e.g. UTM 18N, EPSG:32618):
--     pings(user_id, ts, x, y)   one row per fix
--
-- gp_knn sees one user's whole tuple (one row per user: list(...) GROUP BY user_id) and returns
-- the 1-based positions of the user's k private nearest neighbours of a public point, in rank
-- order. Each call charges the user rho once (k PNN calls at rho/k each). Only positions are
-- released: the coordinates joined back below are the user's own true rows, so show them only to
-- the data holder, or release them with gp_privatize (extra budget).

-- 1. Each user's 3 private nearest fixes to a public point, as positions and timestamps.
WITH tuples AS (
    SELECT user_id,
           list(x ORDER BY ts) AS xs,
           list(y ORDER BY ts) AS ys,
           list(ts ORDER BY ts) AS tss
    FROM pings
    GROUP BY user_id
),
picked AS (
    SELECT user_id, tss, gp_knn(user_id, xs, ys, 500000.0, 4500000.0, 3, 1e-4) AS pos
    FROM tuples
)
SELECT user_id,
       pos,
       list_transform(pos, lambda p: tss[p]) AS picked_ts   -- the model treats timestamps as public
FROM picked
ORDER BY user_id;

-- 2. One row per (user, rank): UNNEST with the rank (NULL pos = refused for lack of budget).
WITH tuples AS (
    SELECT user_id, list(x ORDER BY ts) AS xs, list(y ORDER BY ts) AS ys
    FROM pings GROUP BY user_id
)
SELECT user_id, UNNEST(range(1, len(pos) + 1)) AS knn_rank, UNNEST(pos) AS position
FROM (SELECT user_id, gp_knn(user_id, xs, ys, 500000.0, 4500000.0, 2, 1e-4) AS pos FROM tuples)
WHERE pos IS NOT NULL
ORDER BY user_id, knn_rank;
