"""What every stage is built from: the step declarations and their files and settings, the
config and its schema, the registries of names, the results tree's paths, typed JSON and the
I/O helpers, the dataset format, WordNet, the figure style, and what a job does around its
command (its device, its conda env, its checkout, its lifeline and its measured usage)."""
