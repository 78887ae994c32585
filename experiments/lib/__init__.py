"""What the experiment scripts share, one job per module:

* `configs`: config files (`configs/NAME.py[:ARG]`), typed dotted overrides, main.py commands
  and running them;
* `runs`: a run in its workdir: training (in this process or a fresh main.py one) with resume,
  what it has finished and produced;
* `stats`: mean and standard deviation, the paired bootstrap and approximate randomisation over
  sentences and seeds;
* `reports`: Markdown tables, number formatting, the environment a result was measured in;
* `plots`: figures drawn from the JSON the scripts write;
* `timing`: wall-clock timing of jitted functions;
* `train_bench`: the train step at the benchmark's presets (configs, a random batch, analytic
  matmul FLOPs, the compiled step timed), for the benchmark, the profile and the scaling study;
* `decoding`: a finished run decoded again (its pairs and references, eval with decoding
  settings, warm decoding speed), for the decoding, MBR and translation timing studies;
* `presets`: the `smoke` and `cpu` presets the study scripts share;
* `sweeps`: points of a sweep crossed with seeds, trained (seeds together) and collected;
* `launch`: a sweep handed to a scheduler as a jobs file and an sbatch script;
* `cli`: the command line every sweep script shares;
* `browser`: a headless Chromium that opens explorer reports (the browser test, the timing);
* `pages/`: the results pages' sections and conclusions, and beside them a module per study
  script with its studies' titles, prose, measurement tables and the Markdown the script writes
  (`python -m experiments.pages` writes them all).
"""
