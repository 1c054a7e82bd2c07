"""Generation library: recurrent sampling (grammar-constrained, batched), piano rolls, audio, outputs.

```python
results = generate_batch(model, tokenizer, prompt, max_new_tokens=512, num_samples=4,
                         sampling=SamplingConfig(top_p=0.9, temperature=1.2))   # generation.sampling
render_files(results[0].music, wav="song.wav", ogg="song.ogg")                  # generation.audio
```
"""
