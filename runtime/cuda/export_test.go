package cuda

// OneShotForTest marks every all-reduce of ls one-shot and gives it the
// descriptor and residual parameters, as planCollectives does for a set
// whose GPUs reach each other, then returns the launches fuseResiduals
// leaves. ls's launches are changed.
func OneShotForTest(ls []Launch) []Launch {
	for i := range ls {
		if c := ls[i].Collective; c != nil && !c.Gather {
			c.Peer = true
			ls[i].Params = append(ls[i].Params, 0xde5c, 0)
		}
	}
	return fuseResiduals(ls)
}

// NeedDevices is needDevices for the package's external tests.
var NeedDevices = needDevices
