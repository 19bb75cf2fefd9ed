"""The Result fields the Dask face's parity tests compare with the pandas face's, and the check."""

#: what every charged Result states: its kind, guarantee and charges
CHARGED = (
    "type",
    "mechanism",
    "guarantee",
    "n_users",
    "n_charged",
    "charges",
    "spent_total",
    "spent_max",
)
#: ... and how sure its error is and whom it left out
SUMMARY = (*CHARGED, "error_kind", "confidence", "n_excluded")
#: the public parameters a range count records
RANGE_PARAMS = (
    "method",
    "rounds",
    "split",
    "beta",
    "rho",
    "component",
    "n_regions",
    "crs_m",
    "scale_max",
    "noise_inflation",
)


def assert_same(da: dict, db: dict, keys: tuple[str, ...]) -> None:
    """Assert ``da[key] == db[key]`` for every key, naming the first that differs."""
    for key in keys:
        assert da[key] == db[key], key
