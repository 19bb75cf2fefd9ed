"""The demo's map: a public extent of New York Harbor that frames the AIS sample, over context
shipped with gpframe (the NYC boroughs and the harbour zones, both public domain)."""

import shapely

import gpframe as gp
from gpframe.demo import DEMO_BOX, DEMO_PLACES, load_sample, run_demo


def test_demo_box_frames_the_harbour_and_its_land():
    pts = load_sample()
    box = shapely.box(*DEMO_BOX)
    inside = shapely.contains_xy(box, pts["lon"], pts["lat"]).mean()
    assert inside > 0.7  # the inner harbour: most fixes, not the vessels far out at sea
    land = shapely.union_all(gp.datasets.load("nyc_boroughs").geometry.to_numpy())
    # land and water both in the frame: the boroughs are context, not the whole picture
    assert 0.2 < shapely.intersection(land, box).area / box.area < 0.6


def test_place_labels_sit_in_the_frame_on_land_or_water():
    box = shapely.box(*DEMO_BOX)
    land = shapely.union_all(gp.datasets.load("nyc_boroughs").geometry.to_numpy())
    for text, lon, lat, _rotation, water in DEMO_PLACES:
        assert shapely.contains_xy(box, lon, lat), text
        if text != "New Jersey":  # the boroughs are the only land drawn
            assert shapely.contains_xy(land, lon, lat) != water, text


def test_demo_map_is_written_with_both_panels(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from PIL import Image

    out = run_demo(tmp_path, progress=False)
    png = out["paths"]["private_points.png"]
    with Image.open(png) as im:
        w, h = im.size
    assert w > h > 600  # two panels side by side
    assert out["python"].n_charged == 295  # every vessel of the sample, each charged once
