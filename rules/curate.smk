# Stage: curate. Config lookups: imagenot.curate.plan (imported as curate_plan in rules/common.smk).
