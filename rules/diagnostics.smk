# Stage: diagnostics. Config lookups: imagenot.diagnostics.plan (imported as diagnostics_plan in rules/common.smk).
