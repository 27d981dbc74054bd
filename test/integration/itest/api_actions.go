package itest

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Client403Only keeps polling on Forbidden and stops on any other error.
func Client403Only(err error) error {
	if err == nil || apierrors.IsForbidden(err) {
		return nil
	}
	return err
}
