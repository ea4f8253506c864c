# Stage: evaluate. Config lookups: imagenot.evaluate.plan (imported as evaluate_plan in rules/common.smk).
