package cli

import (
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// PasswordEnv holds a password for automation, read when stdin is not a
// terminal and no --password-file is given.
const PasswordEnv = "ICHOR_PASSWORD"

func newPassword(o *Options) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "password USER",
		Short: "Set an IchorUser's password (prompted twice, never echoed)",
		Long: `password sets an IchorUser's password through ichorusers/password (admins, or whoever manages
users of that role). Ichor keeps only an argon2id hash, which no read returns. The password is
prompted for twice without echo; for automation, read it from --password-file or from the
` + PasswordEnv + ` environment variable.`,
		Example: `  ichor password dana
  ICHOR_PASSWORD=… ichor password ci-bot
  ichor password ci-bot --password-file /run/secrets/ci-bot`,
		GroupID: "access",
		Args:    cobra.ExactArgs(1),
	}
	p := newPrinter(cmd, "password set")
	cmd.Flags().StringVar(&file, "password-file", "", "read the password from this file (its first line)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		password, err := readPassword(o, file)
		if err != nil {
			return err
		}
		c, err := o.client()
		if err != nil {
			return err
		}
		u, err := c.IchorV1alpha1().IchorUsers().UpdatePassword(cmd.Context(), args[0],
			&v1alpha1.IchorUserPassword{ObjectMeta: metav1.ObjectMeta{Name: args[0]}, Password: password}, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		return p.print(o, u)
	}
	return cmd
}

// readPassword reads a new password: from file, from a terminal (twice,
// without echo), or from PasswordEnv.
func readPassword(o *Options, file string) (string, error) {
	return readSecret(o, file, secretInput{what: "password", prompt: "New password", env: PasswordEnv, confirm: true, unchanged: "nothing was changed"})
}
