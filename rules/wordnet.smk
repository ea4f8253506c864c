# WordNet 3.0 as an nltk corpus (from nltk's data if installed, else Debian's /usr/share/wordnet).


rule prepare_wordnet:
    output:
        directory(NLTK_DATA),
    log:
        f"{LOGS}/prepare_wordnet.log",
    benchmark:
        f"{BENCH}/prepare_wordnet.tsv"
    conda:
        "../envs/curate.yaml"
    threads: 1
    resources:
        mem_mb=mem_mb("light"),
        runtime=runtime("light"),
    params:
        dict_dir=wordnet_dict_dir_option(),
    shell:
        "imagenot prepare-wordnet {output} {params.dict_dir} > {log} 2>&1"
