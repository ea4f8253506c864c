# WordNet 3.0 as an nltk corpus (from nltk's data if installed, else Debian's /usr/share/wordnet).


rule prepare_wordnet:
    output:
        nltk_data=directory(NLTK_DATA),
    log:
        f"{LOGS}/prepare_wordnet.log",
    benchmark:
        f"{BENCH}/prepare_wordnet.tsv"
    conda:
        gpu_env("curate")
    threads: 1
    resources:
        **class_resources("light"),
    params:
        settings=to_arg(curate_settings.WordnetSettings.from_config(config)),
    shell:
        step("prepare-wordnet")


# Every (lemma, wnid) pair of WordNet's nouns, once: each matching job reads it in a fraction of
# a second instead of loading WordNet itself (seconds, times thousands of LAION shards).
rule noun_lemmas:
    input:
        nltk_data=NLTK_DATA,
    output:
        lemmas=NOUN_LEMMAS,
    log:
        f"{LOGS}/noun_lemmas.log",
    benchmark:
        f"{BENCH}/noun_lemmas.tsv"
    priority: DATA_PRIORITY
    conda:
        gpu_env("curate")
    threads: 1
    resources:
        **class_resources("light"),
    shell:
        step("lemmas")
