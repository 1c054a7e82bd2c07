"""Training library: run config, checkpoints, the trainer, how a run starts, its process group and run log,
fine-tuning.

```python
status = run_training(RunRequest(config="demo", out="runs/demo"), DistEnv.from_environment())  # training.run
cfg = load_config("demo", overrides=["train.max_steps=100"])       # training.config.RunConfig
corpus = prepare_corpus(cfg.data)                                    # data.build: built on first use
status = Trainer(cfg, corpus, Path("runs/demo"), DistEnv.from_environment(), torch.device("cpu")).fit()
ckpt = load_checkpoint("runs/demo")                                  # model + tokenizer + config
```
"""
