-- Private convex hull per user in DuckDB with gp_convex_hull / gp_convex_hull_gp
-- (docs/operations/convex_hull.md; Liang & Yi, 'Concentrated Geo-Privacy' (2023), Alg. 4).
--
-- Setup (Python):
--     import duckdb, gpframe as gp
--     con = duckdb.connect()
--     session = gp.Session("ledger.sqlite", budget=gp.CGP(rho=1e-3))
--     gp.duckdb.register(con, session, crs="EPSG:32618")   # the metre CRS of x, y
-- and a table in one projected metre CRS (e.g. UTM 18N, EPSG:32618):
--     pings(user_id, ts, x, y)   one row per fix
--
-- gp_convex_hull sees one user's whole tuple (one row per user) and returns the private hull
-- polygon as hex-encoded WKB text in the same CRS (PCH: noisy centre and radius, k anchors by
-- PNN, Gaussian release of the anchors; alpha = 0.92). Optional named arguments: beta := 0.1
-- (failure probability of the radius enlargement) and k := 0 (anchors; 0 = k by the reference
-- rule in [16, 128]). Each call charges the user rho once.
--
-- Reading the hulls:
--   Python:  df = con.sql("SELECT * FROM private_hulls").df()
--            geopandas.GeoSeries.from_wkb(df["hull"], crs="EPSG:32618")   # or shapely.from_wkb
--            (the same on con.sql(...).fetchall(); a BLOB would reach pandas as a bytearray,
--            which shapely and GeoPandas refuse, hence text)
--   SQL:     ST_GeomFromWKB(from_hex(hull)) is a GEOMETRY (built into DuckDB, no extension);
--            COPY a GEOMETRY column to Parquet and it is GeoParquet (query 5 below), which
--            geopandas.read_parquet reads as a geometry column.
--
-- GP: gp_convex_hull_gp(user_id, xs, ys, eps [, beta := ..., k := ...]) uses Laplace phases at
-- eps per metre and charges eps on a GP budget, eps^2/2 on a CGP budget, as
-- df.geopriv(...).convex_hull(eps=...) does.
--
-- The same from Python, as a relation of (user_id, hull) with hex WKB (default), WKT or
-- GEOMETRY hulls (the query runs once; reading the relation again charges nothing):
--     rel = gp.duckdb.convex_hulls(con, "SELECT * FROM pings", user="user_id", x="x", y="y",
--                                  rho=1e-4, geometry="geometry")
--     con.sql("COPY (SELECT * FROM rel) TO 'hulls.parquet'")   # GeoParquet

-- 1. One hull per user (NULL = refused for lack of budget: nothing was charged).
CREATE OR REPLACE TEMP TABLE private_hulls AS
SELECT user_id, gp_convex_hull(user_id, list(x ORDER BY ts), list(y ORDER BY ts), 1e-4) AS hull
FROM pings
GROUP BY user_id;

-- 2. Post-processing of released values only: how many users were answered.
SELECT count(hull) AS n_hulls, count(*) - count(hull) AS n_refused,
       min(octet_length(from_hex(hull))) AS min_wkb_bytes
FROM private_hulls;

-- 3. The GP version with the optional arguments: eps = 0.05 per metre, beta = 0.05, 24 anchors.
SELECT user_id,
       octet_length(from_hex(gp_convex_hull_gp(user_id, list(x ORDER BY ts),
                                               list(y ORDER BY ts), 0.05, beta := 0.05,
                                               k := 24))) AS wkb_bytes
FROM pings
GROUP BY user_id
ORDER BY user_id;

-- 4. SQL sugar: the table macro gp_convex_hulls(query, rho [, beta := ..., k := ...,
--    user := 'user_id', x := 'x', y := 'y']) does the GROUP BY and returns the user column
--    (under its own name) and hull. user, x and y name the query's columns (4b below); a wrong
--    name is a binder error before anything runs. gp_convex_hulls_gp takes eps.
SELECT user_id, octet_length(from_hex(hull)) AS wkb_bytes
FROM gp_convex_hulls('SELECT user_id, x, y FROM pings', 1e-3)
ORDER BY user_id;

-- 4b. The columns named instead of aliased.
SELECT vessel, hull IS NOT NULL AS released
FROM gp_convex_hulls('SELECT user_id AS vessel, x AS x_m, y AS y_m FROM pings', 1e-3,
                     user := 'vessel', x := 'x_m', y := 'y_m')
ORDER BY vessel;

-- 5. The stored hulls as a GEOMETRY column, e.g. for GeoParquet (post-processing: no charge):
--    COPY (SELECT user_id, ST_GeomFromWKB(from_hex(hull)) AS hull FROM private_hulls)
--        TO 'hulls.parquet' (FORMAT parquet);
SELECT user_id, ST_AsText(ST_GeomFromWKB(from_hex(hull))) AS hull_wkt
FROM private_hulls
WHERE hull IS NOT NULL
ORDER BY user_id;
