package main

import "context"

func runCeiling(ctx context.Context, e *env) error   { return nil }
func runSustained(ctx context.Context, e *env) error { return nil }
func runClaimCost(ctx context.Context, e *env) error { return nil }
func runOrdered(ctx context.Context, e *env) error   { return nil }
func runRSS(ctx context.Context, e *env) error       { return nil }
func runChild(mode, url string, n int) error         { return nil }
func writeReport(out string, r *results) error       { return nil }
