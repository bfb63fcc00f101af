package cloudprovider

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	kwok "sigs.k8s.io/karpenter/kwok/cloudprovider"
	"sigs.k8s.io/karpenter/kwok/options"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
)

// InstanceType is one of kwok's instance types and how long a node of it takes to boot.
type InstanceType struct {
	*cloudprovider.InstanceType
	BootDelay time.Duration
}

// bootDelays is what this provider reads of the instance-types file besides kwok's fields:
// "bootDelay", a Go duration ("3m" for a cloud GPU node, "0s" in tests).
type bootDelays []struct {
	Name      string `json:"name"`
	BootDelay string `json:"bootDelay"`
}

// ConstructInstanceTypes reads the instance types as kwok does (INSTANCE_TYPES_FILE_PATH,
// kwok's JSON format), each with its bootDelay.
func ConstructInstanceTypes(ctx context.Context) ([]*InstanceType, error) {
	path := options.FromContext(ctx).InstanceTypesFilePath
	if path == "" {
		return nil, fmt.Errorf("INSTANCE_TYPES_FILE_PATH is not set: the local cluster has no default instance types")
	}
	instanceTypes, err := kwok.ConstructInstanceTypes(ctx)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading instance types, %w", err)
	}
	var delays bootDelays
	if err := json.Unmarshal(raw, &delays); err != nil {
		return nil, fmt.Errorf("parsing instance types' boot delays, %w", err)
	}
	byName := map[string]time.Duration{}
	for _, d := range delays {
		if d.BootDelay == "" {
			continue
		}
		delay, err := time.ParseDuration(d.BootDelay)
		if err != nil {
			return nil, fmt.Errorf("instance type %s: bootDelay %q is not a duration like 90s or 3m, %w", d.Name, d.BootDelay, err)
		}
		byName[d.Name] = delay
	}
	result := make([]*InstanceType, 0, len(instanceTypes))
	for _, it := range instanceTypes {
		result = append(result, &InstanceType{InstanceType: it, BootDelay: byName[it.Name]})
	}
	return result, nil
}
