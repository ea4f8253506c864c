# Stage: figures. Config lookups: imagenot.figures.plan (imported as figures_plan in rules/common.smk).
