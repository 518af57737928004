"""The DAG picture: longest-path layers, barycentre order, and escaped, well-formed SVG."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from jobs.dag_drawing import STATE_COLOURS, DrawNode, render_svg
from jobs.dag_layout import crossings, layered_layout, longest_path_layers

SVG = "{http://www.w3.org/2000/svg}"


def test_layers_follow_the_longest_path_from_a_root() -> None:
    edges = [("a", "b"), ("b", "c"), ("a", "c"), ("c", "d"), ("x", "d")]
    layers = longest_path_layers(["a", "b", "c", "d", "x"], edges)
    # c is two hops from a through b, although a also points at it directly.
    assert layers == {"a": 0, "b": 1, "c": 2, "d": 3, "x": 0}


def test_every_edge_points_rightwards() -> None:
    edges = [("r", f"c{i}") for i in range(5)] + [(f"c{i}", "sink") for i in range(5)]
    edges += [("r", "sink")]
    layout = layered_layout(["sink", *[f"c{i}" for i in range(5)], "r"], edges)
    assert all(layout.position[a][0] < layout.position[b][0] for a, b in edges)
    assert [len(column) for column in layout.layers] == [1, 5, 1]


def test_an_edge_over_several_layers_bends_around_the_nodes_between() -> None:
    edges = [("r", "a"), ("a", "b"), ("b", "sink"), ("r", "sink")]
    layout = layered_layout(["r", "a", "b", "sink"], edges)
    bends = layout.bends[("r", "sink")]
    assert [layer for layer, _ in bends] == [1, 2]
    # Each bend has a slot of its own, beside the node of its layer, never on it.
    assert bends[0] != layout.position["a"]
    assert bends[1] != layout.position["b"]
    assert layout.slots == [1, 2, 2, 1]
    root = _parse(render_svg([DrawNode(k, k) for k in ("r", "a", "b", "sink")], edges))
    paths = root.findall(f"{SVG}g[@class='dag-edges']/{SVG}path")
    long_edge = [p for p in paths if p.get("d", "").count("L") == 2]
    assert len(long_edge) == 1


def test_barycentre_untangles_crossed_edges() -> None:
    # The input order crosses every edge pair: r1 r2 r3 above, their children in reverse.
    nodes = ["r1", "r2", "r3", "c3", "c2", "c1"]
    edges = [("r1", "c1"), ("r2", "c2"), ("r3", "c3")]
    layout = layered_layout(nodes, edges)
    assert crossings(layout, edges) == 0
    assert layout.layers[1] == ["c1", "c2", "c3"]


def test_barycentre_orders_a_two_level_fan_in_without_crossings() -> None:
    nodes = ["a", "b", "a2", "b2", "a1", "b1"]
    edges = [("a", "a1"), ("a", "a2"), ("b", "b1"), ("b", "b2"), ("a1", "x"), ("b2", "x")]
    layout = layered_layout([*nodes, "x"], edges)
    assert crossings(layout, edges) == 0
    rows = {key: row for key, (_, row) in layout.position.items()}
    assert max(rows["a1"], rows["a2"]) < min(rows["b1"], rows["b2"])


def test_a_cycle_in_the_data_does_not_hang_the_layout() -> None:
    layout = layered_layout(["a", "b", "c"], [("a", "b"), ("b", "c"), ("c", "b")])
    assert set(layout.position) == {"a", "b", "c"}
    assert layout.position["a"][0] == 0


def test_no_edges_draws_nothing() -> None:
    assert render_svg([DrawNode("a", "alone")], []) == ""
    assert render_svg([DrawNode("a", "a")], [("a", "missing")]) == ""


def _parse(markup: str) -> ET.Element:
    return ET.fromstring(markup)  # raises on anything that is not well-formed XML


def test_svg_is_well_formed_with_one_arrow_per_edge_and_a_legend() -> None:
    nodes = [
        DrawNode("p", "load-ledger", "succeeded"),
        DrawNode("b", "balances", "upstream_failed"),
        DrawNode("f", "fees", "dead"),
        DrawNode("s", "statements", focus=True),
    ]
    edges = [("p", "b"), ("p", "f"), ("b", "s"), ("f", "s")]
    root = _parse(render_svg(nodes, edges))
    paths = root.findall(f"{SVG}g[@class='dag-edges']/{SVG}path")
    assert len(paths) == 4
    assert all(p.get("marker-end", "").startswith("url(#dag-arrow-") for p in paths)
    rects = {
        g.get("data-state"): g.find(f"{SVG}rect")
        for g in root.iter(f"{SVG}g")
        if g.get("class") == "dag-node"
    }
    assert rects["succeeded"].get("fill") == STATE_COLOURS["succeeded"][0]  # type: ignore[union-attr]
    assert rects["dead"].get("fill") == STATE_COLOURS["dead"][0]  # type: ignore[union-attr]
    assert rects[""].get("stroke-width") == "3"  # type: ignore[union-attr]  # the focus job
    legend = "".join(root.find(f"{SVG}g[@class='dag-legend']").itertext())  # type: ignore[union-attr]
    assert legend == "succeededdeadupstream failedno run yet"


def test_text_and_links_are_escaped() -> None:
    evil = '<script>alert("x")</script>&'
    nodes = [
        DrawNode("a", evil, "succeeded", href='/admin/?a=1&b="2"'),
        DrawNode("b", "child", "weird<state>"),
    ]
    markup = render_svg(nodes, [("a", "b")], note="cut & <b>")
    assert "<script" not in markup
    root = _parse(markup)
    texts = "".join(root.itertext())
    assert evil[:20] in texts
    link = root.find(f".//{SVG}a")
    assert link is not None
    assert link.get("href") == '/admin/?a=1&b="2"'
    assert "cut & <b>" in texts


def test_long_names_are_shortened_and_kept_whole_in_the_tooltip() -> None:
    name = "n" * 80
    root = _parse(render_svg([DrawNode("a", name), DrawNode("b", "b")], [("a", "b")]))
    node = next(g for g in root.iter(f"{SVG}g") if g.get("class") == "dag-node")
    assert name in (node.findtext(f"{SVG}title") or "")
    shown = node.findtext(f"{SVG}text") or ""
    assert len(shown) < 30
    assert shown.endswith("\u2026")


def test_same_graph_same_markup() -> None:
    nodes = [DrawNode(k, k) for k in "abcd"]
    edges = [("a", "b"), ("a", "c"), ("c", "d"), ("b", "d")]
    assert render_svg(nodes, edges) == render_svg(list(reversed(nodes)), list(reversed(edges)))
