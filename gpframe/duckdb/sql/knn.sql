-- Private k nearest neighbours per user in DuckDB with gp_knn / gp_knn_gp
-- (docs/operations/knn.md; Liang & Yi, 'Concentrated Geo-Privacy' (2023), Alg. 2, 3).
--
-- Setup (Python):
--     import duckdb, gpframe as gp
--     con = duckdb.connect()
--     session = gp.Session("ledger.sqlite", budget=gp.CGP(rho=1e-3))
--     gp.duckdb.register(con, session, crs="EPSG:32618")   # the metre CRS of x, y
-- and a table in one projected metre CRS (e.g. UTM 18N, EPSG:32618):
--     pings(user_id, ts, x, y)   one row per fix
--
-- gp_knn sees one user's whole tuple (one row per user: list(...) GROUP BY user_id) and returns
-- the 1-based positions of the user's k private nearest neighbours of a public point, in rank
-- order. Each call charges the user rho once (k PNN calls at rho/k each). Only positions are
-- released: the coordinates joined back below are the user's own true rows, so show them only to
-- the data holder, or release them with gp_privatize (extra budget).
--
-- GP: gp_knn_gp(user_id, xs, ys, px, py, k, eps) runs the k PNN calls at eps/k each (eps per
-- metre) and charges eps on a GP budget, eps^2/2 on a CGP budget, as df.geopriv(...).knn(...,
-- eps=...) does.
--
-- The same from Python, as a relation (the query runs once; reading the relation again charges
-- nothing):
--     rel = gp.duckdb.knn(con, "SELECT * FROM pings", user="user_id", x="x", y="y",
--                         point=(500000.0, 4500000.0), k=3, rho=1e-4, order_by="ts",
--                         public=["ts"])     # columns (user_id, ts, knn_rank): no x, no y

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

-- 3. The GP version: eps = 0.01 per metre for the whole query (each of the 2 calls at 0.005).
WITH tuples AS (
    SELECT user_id, list(x ORDER BY ts) AS xs, list(y ORDER BY ts) AS ys
    FROM pings GROUP BY user_id
)
SELECT user_id, gp_knn_gp(user_id, xs, ys, 500000.0, 4500000.0, 2, 0.01) AS pos
FROM tuples
ORDER BY user_id;

-- 4. SQL sugar: the table macro gp_knn_rows(query, px, py, k, rho [, user := 'user_id',
--    x := 'x', y := 'y']) does the GROUP BY and returns the selected rows of the query WITHOUT
--    its x and y columns, plus knn_rank: k-PNN releases which rows were picked, not where they
--    are. user, x and y name the query's columns (defaults user_id, x, y; a wrong name is a
--    binder error before anything runs); its other columns come out as they are, so select
--    only public ones there (ids, timestamps), never a column computed from the locations.
--    gp_knn_rows_gp takes eps.
SELECT *
FROM gp_knn_rows('SELECT user_id, ts, x, y FROM pings', 500000.0, 4500000.0, 2, 1e-4)
ORDER BY user_id, knn_rank;

-- 4b. The same with the columns named (here the table's own names, e.g. a vessel id and x_m).
SELECT *
FROM gp_knn_rows('SELECT user_id AS vessel, ts, x AS x_m, y AS y_m FROM pings',
                 500000.0, 4500000.0, 2, 1e-4, user := 'vessel', x := 'x_m', y := 'y_m')
ORDER BY vessel, knn_rank;

-- 5. Post-processing of released values only: the median timestamp of each user's GP picks.
SELECT user_id, median(ts) AS median_picked_ts, count(*) AS n_picked
FROM gp_knn_rows_gp('SELECT user_id, ts, x, y FROM pings', 500000.0, 4500000.0, 2, 0.01)
GROUP BY user_id
ORDER BY user_id;
