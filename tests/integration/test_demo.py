"""The demo's map: a public extent that frames the sample, over context shipped with gpframe."""

import shapely

import gpframe as gp
from gpframe.demo import DEMO_BOX, run_demo


def test_demo_box_frames_the_sample_and_its_coast():
    pts = gp.datasets.load("gotrack_aracaju")
    box = shapely.box(*DEMO_BOX)
    inside = shapely.contains_xy(box, pts["lon"], pts["lat"]).mean()
    assert inside > 0.98  # tight but complete: the frame is fixed, the sample fits it
    coast = gp.datasets.load("aracaju_coast")
    land = coast.loc[coast["kind"] == "land", "geometry"].iloc[0]
    # land and sea both in the frame: the coastline crosses it
    assert 0.2 < shapely.intersection(land, box).area / box.area < 0.9


def test_demo_map_is_written_with_both_panels(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from PIL import Image

    out = run_demo(tmp_path, progress=False)
    png = out["paths"]["private_points.png"]
    with Image.open(png) as im:
        w, h = im.size
    assert w > h > 600  # two panels side by side
