"""WordNet subtree statistics of a class list, against a reference list (docs/method.md section 3).

The subtree of a class list is the union of every hypernym path (instance hypernyms included)
from each class up to the root, as a directed graph with edges parent -> child and wnids as
nodes. Its statistics:

- ``nodes``, ``edges``: graph size;
- ``min_depth``, ``median_depth``, ``max_depth``: over the classes, depth = shortest path from
  the root (``entity.n.01``) to the class (nltk's ``Synset.min_depth``);
- ``density``: directed density E / (N (N - 1));
- ``modularity``: modularity of networkx's greedy modularity communities of the undirected graph;
- ``n_classes``; ``n_leaf_classes``: classes that are no other class's ancestor (leaves of the
  subtree); ``n_parents``: distinct direct hypernyms of the classes.

Overlaps with the reference are fractions of the *classes'* own sets: ``synset_overlap`` =
|A ∩ B| / |A| over class wnids, ``parent_overlap`` = |P(A) ∩ P(B)| / |P(A)| over direct
hypernyms, as in the paper ("shared parents over the number of ImageNot parents").
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

import networkx as nx
import pyarrow as pa

from imagenot.core.class_list import ClassEntry, check_class_entries
from imagenot.core.wordnet import wnid as wnid_of

STAT_KEYS = tuple(
    "nodes edges min_depth median_depth max_depth density modularity n_classes n_leaf_classes "
    "n_parents".split()
)


def resolve_classes(wn, entries: Sequence[ClassEntry], source: str = "class list") -> list:
    """Synsets of ``entries`` in list order, after
    :func:`imagenot.core.class_list.check_class_entries` (ClassListError naming every bad
    line at once)."""
    from imagenot.core.wordnet import synset_of

    check_class_entries(entries, source, wn.root.path)
    return [synset_of(wn, entry.wnid) for entry in entries]


# ---------------------------------------------------------------------------------------------
# Pure graph functions


def direct_hypernyms(synset) -> list:
    """Hypernyms and instance hypernyms of a synset."""
    return synset.hypernyms() + synset.instance_hypernyms()


def hypernym_graph(synsets: Iterable) -> nx.DiGraph:
    """Union of all hypernym paths of ``synsets`` to the root: wnid nodes, edges parent -> child.

    Nodes and edges are inserted in sorted order so that every graph algorithm downstream
    (greedy modularity included) is deterministic whatever the list order.
    """
    seen = set(synsets).union(*(s.closure(direct_hypernyms) for s in synsets))  # + ancestors
    edges = {(wnid_of(p), wnid_of(s)) for s in seen for p in direct_hypernyms(s)}
    graph = nx.DiGraph()
    graph.add_nodes_from(sorted(wnid_of(s) for s in seen))
    graph.add_edges_from(sorted(edges))
    return graph


def class_depths(graph: nx.DiGraph, classes: Iterable[str]) -> dict[str, int]:
    """Shortest-path depth of each class from the graph's root(s) (in-degree 0 nodes)."""
    roots = [n for n, d in graph.in_degree() if d == 0]
    dist = nx.multi_source_dijkstra_path_length(graph, roots)  # unit weights: BFS depth
    return {c: int(dist[c]) for c in classes}


def parents_of(synsets: Iterable) -> set[str]:
    """Distinct direct hypernyms (instance hypernyms included) of ``synsets``, as wnids."""
    return {wnid_of(p) for s in synsets for p in direct_hypernyms(s)}


def modularity(graph: nx.DiGraph) -> float:
    """Modularity of networkx's greedy modularity communities of the undirected graph."""
    undirected = graph.to_undirected()
    if undirected.number_of_edges() == 0:
        return 0.0
    communities = nx.community.greedy_modularity_communities(undirected)
    return float(nx.community.modularity(undirected, communities))


def subtree_stats(synsets: Sequence) -> dict:
    """The statistics of STAT_KEYS for a list of class synsets."""
    classes = [wnid_of(s) for s in synsets]
    graph = hypernym_graph(synsets)
    depths = list(class_depths(graph, classes).values())
    stats = {"nodes": graph.number_of_nodes(), "edges": graph.number_of_edges()}
    stats |= {"min_depth": min(depths), "median_depth": float(statistics.median(depths))}
    stats |= {"max_depth": max(depths), "density": float(nx.density(graph))}
    stats |= {"modularity": modularity(graph), "n_classes": len(classes)}
    leaves = sum(graph.out_degree(c) == 0 for c in classes)  # classes with none below them
    return stats | {"n_leaf_classes": leaves, "n_parents": len(parents_of(synsets))}


def overlap(own: set[str], other: set[str]) -> float:
    """|own ∩ other| / |own| (0 for an empty ``own``)."""
    return len(own & other) / len(own) if own else 0.0


def compare(classes: Sequence, reference: Sequence) -> dict:
    """The ``wordnet-stats`` JSON document: stats of both lists and their overlaps."""
    return {
        "classes": subtree_stats(classes),
        "reference": subtree_stats(reference),
        "synset_overlap": overlap({wnid_of(s) for s in classes}, {wnid_of(s) for s in reference}),
        "parent_overlap": overlap(parents_of(classes), parents_of(reference)),
    }


def n_siblings(synset) -> int:
    """WordNet siblings of a class: other hyponyms (instance ones included) of its parents."""
    siblings = {h for p in direct_hypernyms(synset) for h in p.hyponyms() + p.instance_hyponyms()}
    siblings.discard(synset)
    return len(siblings)


PER_CLASS_SCHEMA = pa.schema(
    [(k, pa.string()) for k in ("role", "wnid", "name")]
    + [(k, pa.int32()) for k in ("depth", "n_siblings")]
    + [("is_leaf", pa.bool_()), ("n_parents", pa.int32())]
)


def per_class_table(classes: Sequence, reference: Sequence) -> pa.Table:
    """One row per class of both lists: ``role`` (classes/reference), ``wnid``, ``name``,
    ``depth``, ``n_siblings``, ``is_leaf`` (within its own list's subtree), ``n_parents``."""
    rows = []
    for role, synsets in (("classes", classes), ("reference", reference)):
        ids = [wnid_of(s) for s in synsets]
        graph = hypernym_graph(synsets)
        depths = class_depths(graph, ids)
        for synset, sid in zip(synsets, ids, strict=True):
            row = (role, sid, synset.name(), depths[sid], n_siblings(synset))
            rows.append((*row, graph.out_degree(sid) == 0, len(direct_hypernyms(synset))))
    names = PER_CLASS_SCHEMA.names
    return pa.Table.from_pylist([dict(zip(names, r, strict=True)) for r in rows], PER_CLASS_SCHEMA)
