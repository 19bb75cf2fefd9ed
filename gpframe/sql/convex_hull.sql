-- Private convex hull per user in DuckDB with gp_convex_hull (concentrated-geo-privacy.md §8;
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
-- gp_convex_hull sees one user's whole tuple (one row per user) and returns the private hull
-- polygon as WKB in the same CRS (PCH: noisy centre and radius, k anchors by PNN, Gaussian
-- release of the anchors; beta = 0.1, alpha = 0.92, k by the reference rule in [16, 128]).
-- Each call charges the user rho once. With the spatial extension, ST_GeomFromWKB(hull) gives a
-- GEOMETRY; in Python, shapely.from_wkb.

-- 1. One hull per user (NULL = refused for lack of budget: nothing was charged).
CREATE OR REPLACE TEMP TABLE private_hulls AS
SELECT user_id, gp_convex_hull(user_id, list(x ORDER BY ts), list(y ORDER BY ts), 1e-4) AS hull
FROM pings
GROUP BY user_id;

-- 2. Post-processing of released values only: how many users were answered.
SELECT count(hull) AS n_hulls, count(*) - count(hull) AS n_refused, min(octet_length(hull)) AS min_wkb_bytes
FROM private_hulls;
