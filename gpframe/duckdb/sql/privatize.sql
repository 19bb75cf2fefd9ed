-- gpframe: privatize points row by row in DuckDB, then aggregate the private points.
--
-- Run it from Python after registering the functions on the connection:
--
--     import duckdb, gpframe as gp, gpframe.duckdb
--     con = duckdb.connect()
--     session = gp.Session("ledger.sqlite", budget=gp.CGP(rho=1e-4))
--     gp.duckdb.register(con, session, crs="EPSG:32618")   # the metre CRS of x_m, y_m
--     # a table points_m(mmsi, time, x_m, y_m, ...): e.g. gp.datasets.load("ais_nyharbor_1h"),
--     # projected as below
--     for stmt in open("sql/privatize.sql").read().split(";\n"): ...   # or gpframe.demo
--
-- (`gpframe demo` runs exactly this file; its copy ships as gpframe/duckdb/sql/privatize.sql.)
--
-- Units: gp_privatize(user_id, x, y, rho) takes METRES of the projected CRS named in
-- register(..., crs=...) and returns metres of it. It never projects. SQL has no CRS: with
-- crs= named, a point outside that CRS's area of use (degrees fed as metres land there) is
-- refused before anything is charged, and the CRS's largest scale factor k_max over its area
-- of use divides rho (rho / k_max**2) as the Python accessor's to_crs= does. Without crs=,
-- x/y are unchecked metres, except that a batch of 16+ rows that all fit lon/lat ranges is
-- refused as degrees.
-- Projecting without DuckDB's spatial extension: project in Python before loading, e.g.
--     import pyproj
--     t = pyproj.Transformer.from_crs("EPSG:4326", "EPSG:32618", always_xy=True)
--     df["x_m"], df["y_m"] = t.transform(df["lon"].to_numpy(), df["lat"].to_numpy())
--     con.register("points_df", df)       # then CREATE TABLE points_m AS SELECT * FROM points_df
-- (GeoPandas: gdf.to_crs("EPSG:32618")). Here gpframe.demo does exactly that (UTM zone 18N,
-- EPSG:32618, for one hour of AIS fixes in New York Harbor). With the spatial extension
-- (INSTALL spatial; LOAD spatial;):
--     ST_Transform(ST_Point(lon, lat), 'EPSG:4326', 'EPSG:32618', always_xy := true)
--
-- Charging semantics (read before you write your own queries):
--   * Each row is one point of its user, released at the row's rho; a user with m rows is
--     charged m * rho (per="point" in the Python API: the same rows through
--     df.geopriv(...).privatize(rho=..., per="point") are charged exactly the same).
--   * The user's budget is charged for every row the function is evaluated on, when it is
--     evaluated, through the session's own SQLite store. Rows that the query later drops
--     (a LIMIT, a WHERE on the output, a failed query) are still charged: DuckDB may evaluate
--     more rows than it returns, and the charge is not rolled back with the query.
--     Over-charging is possible; under-charging is not. Every evaluation is charged, even if
--     DuckDB evaluates the function twice for the same row.
--   * A user whose remaining budget cannot pay gets NULL for that batch's rows, uncharged.
--   * NULL in any argument gives NULL and no charge.
--   * Never wrap the function in a scalar subquery: (SELECT gp_privatize(...)) runs once.
--   * Aggregates over the private points are post-processing: they cost nothing more.
--   * Release once, then read the table: a lazy relation (con.sql("SELECT ... gp_privatize(...)")
--     in Python) runs again, with fresh noise and fresh charges, every time it is displayed or
--     fetched. Materialise it (CREATE TABLE ... AS, step 2 below; or .df() once), or call
--     gp.duckdb.privatize(con, query, user=..., x=..., y=..., rho=...), which runs it once.

-- 1. The points, projected to metres. The vessel (its MMSI) is the protected user.
CREATE OR REPLACE TEMP TABLE points AS
SELECT mmsi AS user_id, time, x_m, y_m
FROM points_m;

-- 2. Privatize every row at rho = 1e-6 per m² (sigma ≈ 708 m per coordinate) and keep the
--    private points in a table, so that they are drawn and charged once.
CREATE OR REPLACE TEMP TABLE private_points AS
SELECT user_id, time,
       gp_privatize(user_id, x_m, y_m, 1e-6) AS p
FROM points;

-- 3. Aggregate the private points (post-processing: free): a 2 km grid of point counts.
SELECT floor(p.x / 2000) * 2000 AS cell_x,
       floor(p.y / 2000) * 2000 AS cell_y,
       count(*)                AS private_points,
       count(DISTINCT user_id) AS users
FROM private_points
WHERE p IS NOT NULL
GROUP BY ALL
ORDER BY private_points DESC
LIMIT 10;
