"""Generation library: the request every front door builds, recurrent sampling (grammar-constrained,
batched), piano rolls, audio, outputs.

```python
request = GenerationRequest(bars=8, seed=1)                                     # generation.request
results = request.plan(ckpt, request.check()).run(ckpt.model, device)           # what spe-generate runs
results = generate_batch(model, tokenizer, prompt, max_new_tokens=512, num_samples=4,
                         sampling=SamplingConfig(top_p=0.9, temperature=1.2))   # generation.sampling
tokenizer.write_midi(results[0].tokens, "song.mid")                             # any format
render_files("song.mid", wav="song.wav", ogg="song.ogg")                         # generation.audio
```
"""
