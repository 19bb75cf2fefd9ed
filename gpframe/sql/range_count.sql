-- Private range count in DuckDB with gp_in_region (adaptive-budgeting.md §5.1; issue 5).
--
-- Setup (Python):
--     import duckdb, gpframe as gp
--     from gpframe.duckdb_range import register_range_count
--     con = duckdb.connect()
--     session = gp.Session("ledger.sqlite", budget=gp.CGP(rho=1e-4))
--     register_range_count(con, session)
-- and two tables in one projected metre CRS (e.g. UTM 18N, EPSG:32618):
--     pings(user_id, x, y)   one row per user: the user's selected point (a component, §1.6)
--     zones(name, wkb)       the regions as WKB (shapely.to_wkb(poly) or ST_AsWKB(geom))
--
-- Each user's in/out outcome is released on its own (dist-elim, doubling split, beta = 0.05);
-- SUM is post-processing and costs nothing more. A user decided early is charged only the rounds
-- it ran; the rest stays in the user's budget (session.remaining()). Each zone is one query:
-- a user is charged once per zone.

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
