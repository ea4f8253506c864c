# Stage: acquire. Config lookups: imagenot.acquire.plan (imported as acquire_plan in rules/common.smk).
