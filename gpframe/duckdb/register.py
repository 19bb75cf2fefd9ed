"""``gp.duckdb.register(con, session)``: the gpframe SQL functions on a DuckDB connection.

One module per operation holds its SQL functions and its relation helper, and ``register`` runs
each module's ``register_*`` on the connection:

* :mod:`gpframe.duckdb.privatize`: ``gp_privatize`` / ``gp_privatize_gp`` (a point per row
  with noise) and :func:`privatize`;
* :mod:`gpframe.duckdb.range_count`: ``gp_in_region`` and :func:`range_count` (users, not rows);
* :mod:`gpframe.duckdb.kde`: ``gp_kde_contribution`` for a few probes and :func:`kde_raster`
  for a heatmap over a grid (one release per user, every cell at once);
* :mod:`gpframe.duckdb.knn`: ``gp_knn`` / ``gp_convex_hull`` (and ``_gp``), the table macros
  ``gp_knn_rows`` / ``gp_convex_hulls``, and :func:`knn`, :func:`convex_hulls`,
  :func:`nearest_users`;
* :mod:`gpframe.duckdb.grid`: ``gp_grid_release`` and :func:`clip_user`.

Units: **metres of the CRS named at registration.** SQL has no CRS and the functions never
project, so name the projected metre CRS of x and y: ``register(con, session,
crs="EPSG:32724")``. Then a point outside that CRS's area of use (degrees passed as metres land
there) is refused before anything is charged, and the CRS's largest scale factor k_max over its
area of use divides the amount (ε/k_max, ρ/k_max²), exactly as the accessor's ``to_crs=`` does,
so the stated guarantee holds per ground metre. Feet, Web Mercator and geographic CRSs are
refused at registration. Without ``crs=`` the coordinates are taken as ground metres unchecked
(scale 1), except that a batch of 16 rows or more whose every x is within ±180 and y within ±90
is refused as degrees.

Projecting without DuckDB's spatial extension: project in Python before loading (pyproj
``Transformer.from_crs("EPSG:4326", "EPSG:32724", always_xy=True).transform(lon, lat)``, or
GeoPandas ``gdf.to_crs(...)``), or, with the extension, ``ST_Transform(ST_Point(lon, lat),
'EPSG:4326', 'EPSG:32724', always_xy := true)`` in SQL. The Python accessor (``df.geopriv``)
projects for you.

NULL in any argument gives NULL and no charge. A user whose remaining budget cannot pay for the
batch's rows gets NULL for those rows and no charge (``register(..., on_exhausted="raise")``:
the batch is refused instead, naming them, before anything is reserved or drawn).

Run a release once and keep it: ``con.sql("SELECT ... gp_privatize(...) ...")`` is a lazy
relation, and every display or fetch runs it again (fresh noise, charged again). Write it to a
table (``CREATE TABLE private AS SELECT ...``), fetch it once (``.df()``), or use
:func:`privatize`, which runs the query once and returns a relation over the fetched rows.

Charging, and why it may over-charge
------------------------------------
DuckDB calls an Arrow UDF once per batch of up to 2,048 rows, from several threads. Each call
draws the noise for all of its rows in one sampler call per distinct amount (never per row:
``docs/noise.md``), and makes one ``session.reserve`` and one ``charge`` for the batch, under a
process-wide lock, through the Session's own store (never through this DuckDB connection, so a
failed or rolled-back query cannot undo a charge). Consequences, all on the safe side:

* Every draw is charged, never deduplicated: if DuckDB evaluates the function twice for one row
  (it may, e.g. when an optimiser duplicates an expression), both draws are charged.
* Rows that the query later discards (a ``LIMIT``, a filter on the output, an aborted query) were
  drawn and are charged. DuckDB may also process more rows than a ``LIMIT`` needs.
* A query that fails half way keeps the charges of the batches that ran.
* A column the query never uses may be pruned, and then nothing is drawn or charged for it.

Call the functions directly on rows, never inside a scalar subquery (``(SELECT gp_privatize(...))``
runs once per query). ``side_effects=True`` stops DuckDB from folding constant arguments, merging
repeated calls and running the UDFs during ``EXPLAIN``.

Examples
--------
>>> import duckdb, gpframe as gp
>>> from gpframe.duckdb import register
>>> from gpframe.ledger import Session
>>> con = duckdb.connect()
>>> session = Session(budget=gp.CGP(rho=1e-3))
>>> reg = register(con, session)
>>> reg is register(con, session)       # idempotent
True
>>> q = "SELECT p.x IS NOT NULL FROM (SELECT gp_privatize(7, 500.0, 800.0, 1e-4) AS p)"
>>> con.sql(q).fetchall()
[(True,)]
>>> session.spent().tolist()
[0.0001]
"""

from __future__ import annotations

from typing import Any

from gpframe.duckdb import udf as _u
from gpframe.duckdb.grid import register_grid
from gpframe.duckdb.kde import register_kde
from gpframe.duckdb.knn import register_knn
from gpframe.duckdb.privatize import Registration, register_privatize
from gpframe.duckdb.range_count import register_range_count

__all__ = ["register"]


def register(
    con: Any,
    session: Any,
    *,
    crs: Any = None,
    domain: Any = None,
    rng: Any = None,
    on_exhausted: str = "exclude",
) -> Registration:
    """Register every gpframe SQL function and macro on ``con``, charging ``session``.

    Idempotent: calling it again on the same connection returns the same registration (and
    points it at ``session``, ``crs`` and ``rng`` if others are passed). UDFs are not stored in a
    database file, so register them in every process; the helper macros are ``TEMP`` for the
    same reason.

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
        The connection to add the functions to.
    session : gpframe.Session
        The ledger the functions charge. It uses its own store connection, never ``con``.
    crs : str, int or pyproj.CRS, optional
        The projected metre CRS of every x / y the functions receive (e.g. ``"EPSG:32724"``, the
        data's UTM zone). SQL has no CRS, so name it here: coordinates outside its area of use
        (degrees passed as metres land there) are refused before anything is charged, and its
        largest scale factor k_max over that area divides the amount as the accessor's
        ``to_crs=`` does (ε/k_max, ρ/k_max²), so the guarantee holds per ground metre. Without
        it, x / y are taken as ground metres unchecked, except that a batch of 16 or more rows
        that all fit lon/lat ranges is refused as degrees (by ``gp_privatize``,
        ``gp_in_region`` and ``gp_knn``). Applies to ``gp_privatize`` / ``gp_privatize_gp``,
        ``gp_in_region``, ``gp_knn`` / ``gp_knn_gp``, ``gp_convex_hull`` /
        ``gp_convex_hull_gp``, ``gp_kde_contribution``, the table macros built on them and
        :func:`privatize`, :func:`range_count`, :func:`knn`, :func:`convex_hulls`,
        :func:`nearest_users` and :func:`kde_raster`; not to the grid functions
        (``gp_grid_release``, :func:`clip_user`), which take cells, not metres.
    domain : (lon_min, lat_min, lon_max, lat_max), optional
        A public box in degrees to use instead of the CRS's area of use (needed for a CRS that
        publishes none; a smaller box gives a k_max closer to 1).
    rng : BitSource or None
        Randomness source; None is the OS CSPRNG (tests pass ``gp.testing.seeded_rng``).
    on_exhausted : {"exclude", "raise"}
        What the metric functions do with a user whose budget cannot pay (``docs/sql.md``):
        ``"exclude"`` gives NULL for that user's rows and charges them nothing; ``"raise"``
        refuses the batch with a ``BudgetExceededError`` naming the users, before it reserves
        or draws anything (batches of the same query that ran before stay charged: preview the
        query with :func:`gpframe.duckdb.preview.preview`, or use a relation helper, which
        plans its whole query first). Also the default of the relation helpers'
        ``on_exhausted=``, ``gp.duckdb.grid_stats``'s and ``gp.duckdb.clip_user``'s (whose
        ``"raise"`` refuses a plan that would leave a user out, naming them, and makes
        ``gp_grid_release`` refuse a batch whose kept users can no longer pay).

    Returns
    -------
    Registration
        The registration of ``gp_privatize`` / ``gp_privatize_gp``: the session and counters
        (:class:`gpframe.duckdb.privatize.Registration`).
    """
    _u.check_session(session)
    _u.check_on_exhausted(on_exhausted, "register")
    rng = _u.checked_rng(rng)
    units = _u.units_for(crs, domain)
    reg = register_privatize(con, session, crs=units, rng=rng)
    for r in (reg, register_range_count(con, session, crs=units, rng=rng),
              register_kde(con, session, crs=units, rng=rng), register_grid(con, session, rng=rng),
              register_knn(con, session, crs=units, rng=rng)):  # fmt: skip
        r.on_exhausted = on_exhausted
    return reg
