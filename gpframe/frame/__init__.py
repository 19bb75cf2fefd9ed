"""The pandas / geopandas face: ``df.geopriv(session, user=...)`` and one thin module per operation.

Importing this package registers the ``geopriv`` accessor on DataFrames and GeoDataFrames.
"""

from gpframe.frame import accessor  # noqa: F401 - registers df.geopriv
