"""WordNet subtree statistics (`imagenot wordnet-stats`), checked against hand counts and an
independent path-enumerating computation."""

from __future__ import annotations

import itertools
import json
import statistics

import jsonschema
import networkx as nx
import pytest

from imagenot.core import class_list as cl
from imagenot.core.wordnet import imagenet_wnids, synset_of, wnid
from imagenot.diagnostics import wordnet_stats as ws

PUBLISHED = ("imagenot_classes_2024-04-02.txt", "imagenot_classes_2024-05-25.txt")

_STATS = {
    "type": "object",
    "additionalProperties": False,
    "required": list(ws.STAT_KEYS),
    "properties": {
        "nodes": {"type": "integer", "minimum": 1},
        "edges": {"type": "integer", "minimum": 0},
        "min_depth": {"type": "integer", "minimum": 0},
        "median_depth": {"type": "number", "minimum": 0},
        "max_depth": {"type": "integer", "minimum": 0},
        "density": {"type": "number", "minimum": 0, "maximum": 1},
        "modularity": {"type": "number", "minimum": -0.5, "maximum": 1},
        "n_classes": {"type": "integer", "minimum": 1},
        "n_leaf_classes": {"type": "integer", "minimum": 0},
        "n_parents": {"type": "integer", "minimum": 0},
    },
}
DOCUMENT_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["classes", "reference", "synset_overlap", "parent_overlap"],
    "properties": {
        "classes": _STATS,
        "reference": _STATS,
        "synset_overlap": {"type": "number", "minimum": 0, "maximum": 1},
        "parent_overlap": {"type": "number", "minimum": 0, "maximum": 1},
    },
}

DOG, CAT, BIRD, CHIHUAHUA, WOLF = "n02084071", "n02121620", "n01503061", "n02085620", "n02114100"
EINSTEIN = "n10954498"  # an instance: its only link upward is an instance hypernym


def synsets(wn, ids):
    return [synset_of(wn, i) for i in ids]


@pytest.fixture(scope="module")
def imagenet(wn):
    return synsets(wn, imagenet_wnids())


def independent_stats(class_synsets) -> dict:
    """The statistics recomputed from nltk's enumerated hypernym paths (no shared code)."""
    nodes, edges, depths, parents = set(), set(), [], set()
    for s in class_synsets:
        paths = s.hypernym_paths()  # root ... s, instance hypernyms included
        depths.append(min(len(p) - 1 for p in paths))
        for p in paths:
            nodes.update(x.name() for x in p)
            edges.update((a.name(), b.name()) for a, b in itertools.pairwise(p))
        parents.update(x.name() for x in s.hypernyms() + s.instance_hypernyms())
    names = {s.name() for s in class_synsets}
    ancestors = {a for a, _ in edges}
    n = len(nodes)
    return {
        "nodes": n,
        "edges": len(edges),
        "min_depth": min(depths),
        "median_depth": statistics.median(depths),
        "max_depth": max(depths),
        "density": len(edges) / (n * (n - 1)),
        "n_classes": len(class_synsets),
        "n_leaf_classes": len(names - ancestors),
        "n_parents": len(parents),
    }


def test_hand_counted_subset(wn):
    # dog, cat, bird, chihuahua: 7 shared nodes entity..animal, then domestic_animal, chordate,
    # vertebrate, mammal, placental, carnivore, canine, dog, feline, cat, bird, toy_dog, chihuahua
    # = 20 nodes; the tree plus the second parent of dog (domestic_animal) = 20 edges.
    stats = ws.subtree_stats(synsets(wn, [DOG, CAT, BIRD, CHIHUAHUA]))
    assert stats["nodes"] == 20
    assert stats["edges"] == 20
    # dog: 8 via domestic_animal; cat 13; bird 9; chihuahua 10 (dog + toy_dog)
    assert (stats["min_depth"], stats["median_depth"], stats["max_depth"]) == (8, 9.5, 13)
    assert stats["density"] == pytest.approx(20 / (20 * 19))
    assert stats["n_classes"] == 4
    assert stats["n_leaf_classes"] == 3  # dog is chihuahua's ancestor
    assert stats["n_parents"] == 5  # domestic_animal, canine, feline, vertebrate, toy_dog


def test_overlaps_are_fractions_of_the_classes_own_sets(wn):
    doc = ws.compare(synsets(wn, [DOG, CAT, BIRD, CHIHUAHUA]), synsets(wn, [CAT, WOLF]))
    assert doc["synset_overlap"] == pytest.approx(1 / 4)  # cat
    assert doc["parent_overlap"] == pytest.approx(2 / 5)  # feline, canine
    assert doc["reference"]["n_parents"] == 2


def test_instance_hypernyms_are_followed(wn):
    stats = ws.subtree_stats(synsets(wn, [EINSTEIN]))
    # entity, physical_entity, object, whole, living_thing, organism, causal_agent, person,
    # scientist, physicist, einstein; person has two parents (organism, causal_agent)
    assert stats["nodes"] == 11
    assert stats["edges"] == 11
    assert stats["min_depth"] == stats["max_depth"] == 6
    assert stats["n_parents"] == 1


def test_modularity_matches_the_formula_on_greedy_communities(wn):
    graph = ws.hypernym_graph(synsets(wn, [DOG, CAT, BIRD, CHIHUAHUA, EINSTEIN]))
    undirected = graph.to_undirected()
    communities = nx.community.greedy_modularity_communities(undirected)
    m = undirected.number_of_edges()
    expected = 0.0
    for community in communities:
        inside = undirected.subgraph(community).number_of_edges()
        degree = sum(d for _, d in undirected.degree(community))
        expected += inside / m - (degree / (2 * m)) ** 2
    assert ws.modularity(graph) == pytest.approx(expected)
    assert ws.modularity(graph) > 0  # better than one community (Q = 0)


def test_graph_edges_point_from_parent_to_child(wn):
    graph = ws.hypernym_graph(synsets(wn, [DOG]))
    assert graph.has_edge("n02083346", DOG)  # canine.n.02 -> dog.n.01
    assert not graph.has_edge(DOG, "n02083346")
    assert [n for n, d in graph.in_degree() if d == 0] == ["n00001740"]  # entity.n.01


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_lists(wn, class_lists, imagenet, name):
    entries = cl.read_class_entries(class_lists / name)
    classes = ws.resolve_classes(wn, entries, name)
    doc = ws.compare(classes, imagenet)
    jsonschema.validate(doc, DOCUMENT_SCHEMA)
    assert doc["classes"]["n_classes"] == len(entries) == 1000
    assert doc["synset_overlap"] == 0.0  # disjoint from ImageNet by construction
    assert not {wnid(s) for s in classes} & set(imagenet_wnids())
    assert 0 < doc["parent_overlap"] < 1
    # The authors' list keeps some ancestors of other classes (docs/method.md step 4).
    assert doc["classes"]["n_leaf_classes"] < 1000
    independent = independent_stats(classes)
    for key, value in independent.items():
        assert doc["classes"][key] == pytest.approx(value), key


def test_imagenet_against_itself(imagenet):
    doc = ws.compare(imagenet, imagenet)
    jsonschema.validate(doc, DOCUMENT_SCHEMA)
    assert doc["synset_overlap"] == doc["parent_overlap"] == 1.0
    assert doc["classes"] == doc["reference"]
    assert doc["classes"]["n_leaf_classes"] == 1000  # ImageNet's classes are WordNet leaves
    for key, value in independent_stats(imagenet).items():
        assert doc["classes"][key] == pytest.approx(value), key


def test_result_does_not_depend_on_list_order(wn, imagenet):
    shuffled = imagenet[::-1]
    assert ws.subtree_stats(shuffled) == ws.subtree_stats(imagenet)


def test_bad_lines_are_reported_with_line_numbers(wn, tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text(f"# header\n{DOG}\ndog\n\nn99999999\n{DOG}\nn02084072  offset inside a line\n")
    with pytest.raises(cl.ClassListError) as info:
        ws.resolve_classes(wn, cl.read_class_entries(path), "bad.txt")
    message = str(info.value)
    assert "4 bad line(s)" in message
    assert "bad.txt:3: malformed" in message and "'dog'" in message
    assert "bad.txt:5: unknown id n99999999" in message
    assert "bad.txt:6: duplicate id n02084071 (first on line 2)" in message
    assert "bad.txt:7: unknown id n02084072" in message


def test_parquet_class_list(wn, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"wnid": [CAT, DOG], "score": [0.9, 0.8]}), tmp_path / "c.parquet")
    entries = cl.read_class_entries(tmp_path / "c.parquet")
    assert [(e.wnid, e.line) for e in entries] == [(CAT, 1), (DOG, 2)]


def test_per_class_table(wn):
    table = ws.per_class_table(synsets(wn, [DOG, CHIHUAHUA]), synsets(wn, [CAT]))
    rows = {(r["role"], r["wnid"]): r for r in table.to_pylist()}
    assert rows[("classes", DOG)]["depth"] == 8
    assert rows[("classes", DOG)]["is_leaf"] is False
    assert rows[("classes", CHIHUAHUA)]["is_leaf"] is True
    assert rows[("classes", DOG)]["n_parents"] == 2
    cat = synset_of(wn, CAT)
    expected_siblings = {h for p in cat.hypernyms() for h in p.hyponyms()} - {cat}
    assert rows[("reference", CAT)]["n_siblings"] == len(expected_siblings) > 0


def test_cli_json_and_bad_list(nltk_data, class_lists, tmp_path, capsys):
    from imagenot.cli import main

    out = tmp_path / "stats.json"
    argv = ["wordnet-stats", "--classes", str(class_lists / PUBLISHED[1])]
    argv += ["--nltk-data", str(nltk_data), "--json", "--stats", str(out)]
    argv += ["--per-class", str(tmp_path / "per_class.parquet")]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    jsonschema.validate(printed, DOCUMENT_SCHEMA)
    assert printed["reference"]["n_classes"] == 1000  # ImageNet from timm by default

    bad = tmp_path / "bad.txt"
    bad.write_text(f"{DOG}\nn0208407x\n")
    argv = ["wordnet-stats", "--classes", str(bad), "--nltk-data", str(nltk_data), "--json"]
    assert main(argv) == 2
    assert f"{bad}:2: malformed" in capsys.readouterr().err
