-- Private range count in DuckDB with gp_in_region (docs/operations/range_count.md; Liang & Yi,
-- 'Adaptive Privacy Budgeting' (2026), Alg. 6).
--
-- Setup (Python):
--     import duckdb, gpframe as gp
--     con = duckdb.connect()
--     session = gp.Session("ledger.sqlite", budget=gp.CGP(rho=1e-4))
--     gp.duckdb.register(con, session, crs="EPSG:32618")   # the metre CRS of x, y and wkb
-- and two tables in that projected metre CRS (UTM 18N here):
--     fixes(user_id, ts, x, y)  one row per fix
--     zones(name, wkb)          the regions as WKB (shapely.to_wkb(poly) or ST_AsWKB(geom))
--
-- gp_in_region releases and charges each ROW: SUM over all fixes counts rows, not users (a
-- user with 500 fixes would be counted up to 500 times and charged 500 times). Count users by
-- giving it ONE row per user, the user's component, chosen from public columns only (never
-- from x/y): step 0 keeps each user's last fix by time. From Python,
--     gp.duckdb.range_count(con, "SELECT * FROM fixes", zone_polygon, user="user_id", x="x",
--                           y="y", rho=1e-5, rounds=10, component=Last("ts"))
-- does the same with the accessor's component= rules (None, ("hour", 7), "first", "last",
-- First/Last(col, after/before=...), reduce=) and returns the count per region.
--
-- Each user's in/out outcome is released on its own (dist-elim, doubling split, beta = 0.05);
-- SUM is post-processing and costs nothing more. A user decided early is charged only the rounds
-- it ran; the rest stays in the user's budget (session.remaining()). Each zone is one query:
-- a user is charged once per zone.

-- 0. One row per user: the user's last fix (the component).
CREATE OR REPLACE TEMP TABLE pings AS
SELECT user_id, arg_max(x, ts) AS x, arg_max(y, ts) AS y
FROM fixes
GROUP BY user_id;

-- 1. The count per zone. n_users fixes the union bound of the elimination widths so the result
--    does not depend on DuckDB's batching (here: all rows of pings).
SELECT z.name,
       SUM(gp_in_region(p.user_id, p.x, p.y, z.wkb, 1e-5, 10,
                        (SELECT count(*) FROM pings))::INT) AS private_count
FROM pings AS p CROSS JOIN zones AS z
GROUP BY z.name
ORDER BY z.name;

-- 2. Post-processing of released outcomes only: the share of users inside (NULL = excluded for
--    lack of budget, not counted).
SELECT avg(inside::INT) AS share_inside,
       count(inside)    AS n_answered,
       count(*) - count(inside) AS n_excluded
FROM (SELECT gp_in_region(user_id, x, y, (SELECT wkb FROM zones LIMIT 1), 1e-5, 10) AS inside
      FROM pings);
