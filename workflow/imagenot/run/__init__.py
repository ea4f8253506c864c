"""A run once it has been made: its summary and report, which study a results tree belongs to, a
copied run's file times, what ``snakemake --report`` may trust, and ``imagenot
validate-config``."""
