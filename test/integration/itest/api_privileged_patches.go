package itest

// PrivilegedVerb is how a refusal names the verb admins hold.
const PrivilegedVerb = `needs the "update" verb on talosconfigpatches/privileged`
