package cuda

// OneShotForTest marks every all-reduce of ls one-shot and gives it the
// descriptor, residual and norm parameters, as planCollectives does for
// a set whose GPUs reach each other, then returns the launches
// fuseResiduals leaves (taking in norms where norms says so). ls's
// launches are changed.
func OneShotForTest(ls []Launch, norms bool) []Launch {
	for i := range ls {
		if c := ls[i].Collective; c != nil && !c.Gather {
			c.Peer = true
			ls[i].Params = append(ls[i].Params, 0xde5c, 0, 0, 0, 0)
		}
	}
	return fuseResiduals(ls, norms)
}

// NeedDevices is needDevices for the package's external tests.
var NeedDevices = needDevices

// Parameter indices of the fused launches, for tests.
const (
	ReduceResidual, ReduceNormW, ReduceNormY, ReduceEps = reduceResidual, reduceNormW, reduceNormY, reduceEps
)
