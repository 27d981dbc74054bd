package itest

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var APIDryRun = []string{metav1.DryRunAll}
