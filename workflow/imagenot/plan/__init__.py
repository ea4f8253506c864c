"""What a config will cost before launch (``imagenot plan``): the jobs Snakemake plans for it,
each rule's resources sized from its work, the training schedule on a number of GPUs, the data
stages on the plan's cores, measured GPU speeds, and the SLURM site profile."""
