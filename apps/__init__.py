"""The commands: spe-train, spe-generate, spe-evaluate, spe-studio and the demo (a `main()` each);
the library they call lives in training/, generation/, evaluation/ and data/."""
