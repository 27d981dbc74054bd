// Package issuer is Ichor's token issuer for IchorUsers (ichor-auth): an
// OpenID provider that kube-apiserver trusts through its structured
// authentication configuration.
//
// A user signs in with a password (the OAuth 2.0 password grant at the
// token endpoint); the issuer has ichor-apiserver check it
// (ichorusers/NAME/login, whose verb only the issuer holds: the hash never
// leaves ichor-apiserver) and answers with a short-lived ID token, which
// kubectl sends as a bearer token, and a refresh token for a session of
// bounded length. Each refresh looks at the user again: a disabled or
// deleted user, or one whose password changed, gets no new token, so a
// user is locked out within one token lifetime. Refresh tokens rotate on
// every use; a used one presented again ends its session.
//
// The issuer keeps its signing keys and sessions in two Secrets of its own
// namespace, which its RBAC names one by one. Signing keys rotate: a new
// key is published in the JWKS a lead time before it signs, and an old one
// stays published until every token it signed has expired.
package issuer
