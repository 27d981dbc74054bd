// Package ui is ichor-ui, Ichor's web console.
//
// Its trust model is the point: the browser holds an ichor-ui session (a
// random id in an HttpOnly, Secure, SameSite=Strict cookie) and nothing
// else; no Kubernetes or Talos credential ever reaches it. The backend
// acts for the signed-in person by impersonation only, and holds nothing
// that can write to a node or read a Secret.
//
// Sign-in: an Ichor user's password goes once to ichor-auth (the password
// grant), and the ID token it answers with goes once to kube-apiserver as
// a SelfSubjectReview, so the person ichor-ui acts as is exactly the one
// kube-apiserver's authentication configuration makes of the token; the
// token is then dropped. ichor-ui impersonates only an "ichor:" or "oidc:"
// user, never a "system:" name, and only the Ichor role groups; its RBAC
// (artifacts/ui-rbac.yaml) allows impersonating those groups by name, but
// cannot express "users with this prefix", which is why the backend checks
// the name itself (servable). People of the OpenID provider kube-apiserver
// trusts sign in there (authorization code with PKCE, state and nonce); the
// ID token is verified and then reviewed the same way, and the provider's
// refresh token stays on the server too. The issuer's refresh token stays on the
// server: each time the ID token would have expired, the session is
// renewed and the person looked at again, so a disabled user is locked out
// of the console as fast as out of kubectl.
//
// Every answer carries HSTS and a strict Content-Security-Policy; every
// state-changing request needs the session's CSRF token and a same-origin
// Origin. Pages are server-rendered Go templates; every asset is embedded,
// and the only script (static/live.js, from 'self') puts into a page the
// fragments the server renders from a watch of the API and sends as
// server-sent events, so progress moves without a reload. Downloads stream
// through ichor-apiserver's download subresources as the person: the
// console never holds a Talos credential, not even for one download.
package ui
