// mask_mod: prefix-LM. The first args.integer[0] positions (the prefix) are visible to
// every query; after them attention is causal. Use without --causal (the causal part is
// here).
return kv_idx <= q_idx || kv_idx < args.integer[0];
