-- Private Gaussian KDE in DuckDB with gp_kde_contribution (docs/operations/kde.md; Liang & Yi,
-- 'Adaptive Privacy Budgeting' (2026), Alg. 7).
--
-- Setup (Python):
--     import duckdb, gpframe as gp
--     from gpframe.duckdb.kde import register_kde
--     con = duckdb.connect()
--     session = gp.Session("ledger.sqlite", budget=gp.CGP(rho=1e-4))
--     register_kde(con, session)
-- and tables in one projected metre CRS (e.g. UTM 18N, EPSG:32618):
--     pings(user_id, x, y)   one row per user: the user's selected point (a component,
--     docs/ledger.md)
--     probes(name, qx, qy)   public query points
--
-- Each user's contribution exp(-d^2 / (2 b^2)) is released on its own (pt-elim, nu = 3b, doubling
-- split, beta = 0.05): users confidently farther than nu from the probe stop early, contribute 0
-- and are charged only the rounds they ran. AVG is post-processing. Each probe is one query.
--
-- Cost: every (user, probe) row runs its own elimination and its own charge, so the work and the
-- spend grow with users x probes: use it for a few probes. For a heatmap over a grid of probes,
-- use the relation helper gp.duckdb.kde_raster (Python). It releases each user's point once (the
-- pt baseline, charged rho once however many cells), evaluates the bias-corrected KDE on every
-- cell at once, runs once and returns the cells as a relation, with the same parameters,
-- defaults, noise and charges as df.geopriv(...).kde_raster(...):
--
--     cells = gp.duckdb.kde_raster(
--         con, "SELECT user_id, x, y FROM pings", user="user_id", x="x", y="y",
--         bandwidth_m=1500, cell_m=250, bounds=(490000, 4490000, 510000, 4510000), rho=1e-4)
--     cells.columns                     # ['x', 'y', 'density']: cell centres, density per m2
--     con.sql("COPY (SELECT * FROM cells) TO 'heatmap.parquet'")   # reading again: no charge
--
-- bounds are in the same metres as x and y (None: the released points' extent padded by 3h);
-- eps= instead of rho= on a GP session; correct=False keeps the noise's extra smoothing.
-- benchmarks/speed/kde_sql.py times both paths at 64 / 144 / 400 probes.

-- 1. KDE at each probe, bandwidth 500 m, rho = 1e-5 per user and probe.
SELECT q.name,
       AVG(gp_kde_contribution(p.user_id, p.x, p.y, q.qx, q.qy, 500.0, 1e-5, 10,
                               (SELECT count(*) FROM pings))) AS private_kde
FROM pings AS p CROSS JOIN probes AS q
GROUP BY q.name
ORDER BY q.name;

-- 2. Share of users still near the probe (post-processing: a non-zero contribution means the
--    user was not eliminated). NULL = excluded for lack of budget.
SELECT avg((c > 0)::INT) AS share_near, count(c) AS n_answered
FROM (SELECT gp_kde_contribution(user_id, x, y, 500000.0, 4500000.0, 500.0, 1e-5, 10) AS c
      FROM pings);
