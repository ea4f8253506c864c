# Stage: demo. Config lookups: imagenot.demo.plan (imported as demo_plan in rules/common.smk).
