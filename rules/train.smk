# Stage: train. Config lookups: imagenot.train.plan (imported as train_plan in rules/common.smk).
