// Package ui is ichor-ui, Ichor's web console.
//
// Its trust model is the point: the browser holds an ichor-ui session (a
// random id in an HttpOnly, Secure, SameSite=Strict cookie) and nothing
// else; no Kubernetes or Talos credential ever reaches it. ichor-ui holds
// no credential of its own either: every request it sends kube-apiserver
// for a person carries that person's own short-lived ID token, kept on the
// server with the session, so kube-apiserver authenticates, authorizes and
// audits the person, and a stolen ichor-ui can act as nobody beyond the
// people signed in to it at that moment, for their tokens' lifetime.
//
// Sign-in: an Ichor user's password goes once to ichor-auth (the password
// grant); the ID token it answers with goes to kube-apiserver as a
// SelfSubjectReview, which says who the person is to kube-apiserver (an
// "ichor:" or "oidc:" user, never a "system:" name). People of the OpenID
// provider kube-apiserver trusts sign in there (authorization code with
// PKCE, state and nonce); the ID token is verified and reviewed the same
// way. Each refresh token stays on the server: shortly before the ID token
// expires, the session is renewed and the person looked at again, so a
// disabled user is locked out of the console as fast as out of kubectl,
// and a session whose provider renews without a new ID token ends.
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
