"""A plugin module (config key ``plugins: [imagenot_toy_plugin]``): registers the toy entries."""

from toy_entries import ENTRIES

for registry, name, entry in ENTRIES:
    registry.register(name, entry)
