{{/*
The certificates of the chart, one table: each Secret, the names it is valid
for and the chart's CA that issues it. Every other template is built from it.
*/}}
{{- define "ichor.certificates" -}}
{{- $ns := .Release.Namespace -}}
{{- $svc := dict -}}
{{- range $name := list "ichor-apiserver" "ichor-controller" "ichor-auth" "ichor-ui" -}}
{{- $_ := set $svc $name (list $name (printf "%s.%s" $name $ns) (printf "%s.%s.svc" $name $ns) (printf "%s.%s.svc.cluster.local" $name $ns)) -}}
{{- end -}}
apiserver:
  secret: ichor-apiserver-tls
  ca: ichor-ca
  dnsNames: {{ toJson (get $svc "ichor-apiserver") }}
controller:
  secret: ichor-controller-tls
  ca: ichor-ca
  dnsNames: {{ toJson (get $svc "ichor-controller") }}
{{- if .Values.auth.enabled }}
auth:
  secret: ichor-auth-tls
  ca: ichor-ca
  dnsNames: {{ toJson (prepend (get $svc "ichor-auth") (include "ichor.urlHost" .Values.auth.issuerURL) | uniq) }}
{{- end }}
{{- if .Values.ui.enabled }}
ui:
  secret: ichor-ui-tls
  ca: ichor-ca
  dnsNames: {{ toJson (prepend (get $svc "ichor-ui") (include "ichor.urlHost" .Values.ui.url) | uniq) }}
uiClient:
  # The client certificate ichor-ui presents to ichor-auth, from a CA of its
  # own that ichor-auth trusts to name each browser (--trusted-proxy-ca-file).
  secret: ichor-ui-client-tls
  ca: ichor-ui-client-ca
  client: true
  dnsNames: [ichor-ui]
{{- end }}
{{- end }}

{{/*
ichor.generatedTLS: in generate mode, the chart's own CAs and certificates,
made once per render and kept in .Values.__ichorGeneratedTLS for every
template that needs them. A certificate in the cluster is kept while it is
signed by the CA in use, valid for the same names and not within
renewBeforeDays of its end; otherwise it is made again (and so are all of a
new CA's).
*/}}
{{- define "ichor.generatedTLS" -}}
{{- if not (hasKey .Values "__ichorGeneratedTLS") -}}
{{- $ns := .Release.Namespace -}}
{{- $now := now | unixEpoch | int64 -}}
{{- $days := int .Values.tls.validityDays -}}
{{- $renewAfter := add $now (mul (sub $days (int .Values.tls.renewBeforeDays)) 86400) -}}
{{- $out := dict -}}
{{- $certs := include "ichor.certificates" . | fromYaml -}}
{{- $caNames := list -}}
{{- range $certs }}{{ $caNames = append $caNames .ca }}{{ end -}}
{{- $cas := dict -}}
{{- range $caName := $caNames | uniq -}}
{{- $old := lookup "v1" "Secret" $ns $caName -}}
{{- $ca := dict -}}
{{- if and $old $old.data (gt (int64 (dig "metadata" "annotations" "ichor.dev/renew-after" "0" $old)) $now) -}}
{{- $ca = dict "crt" (index $old.data "tls.crt" | b64dec) "key" (index $old.data "tls.key" | b64dec) "renewAfter" (dig "metadata" "annotations" "ichor.dev/renew-after" "0" $old) "new" false -}}
{{- $_ := set $ca "signer" (buildCustomCert (index $old.data "tls.crt") (index $old.data "tls.key")) -}}
{{- else -}}
{{- $signer := genCAWithKey $caName $days (genPrivateKey "ecdsa") -}}
{{- $ca = dict "crt" $signer.Cert "key" $signer.Key "renewAfter" (toString $renewAfter) "new" true "signer" $signer -}}
{{- end -}}
{{- $_ := set $cas $caName $ca -}}
{{- end -}}
{{- $_ := set $out "cas" $cas -}}
{{- $leaves := dict -}}
{{- range $id, $c := $certs -}}
{{- $ca := get $cas $c.ca -}}
{{- $names := join "," $c.dnsNames -}}
{{- $old := lookup "v1" "Secret" $ns $c.secret -}}
{{- $leaf := dict -}}
{{- if and $old $old.data (not $ca.new) (eq (index $old.data "ca.crt" | default "" | b64dec) $ca.crt) (eq (dig "metadata" "annotations" "ichor.dev/dns-names" "" $old) $names) (gt (int64 (dig "metadata" "annotations" "ichor.dev/renew-after" "0" $old)) $now) -}}
{{- $leaf = dict "crt" (index $old.data "tls.crt" | b64dec) "key" (index $old.data "tls.key" | b64dec) "renewAfter" (dig "metadata" "annotations" "ichor.dev/renew-after" "0" $old) -}}
{{- else -}}
{{- $cert := genSignedCertWithKey (first $c.dnsNames) nil $c.dnsNames $days $ca.signer (genPrivateKey "ecdsa") -}}
{{- $leaf = dict "crt" $cert.Cert "key" $cert.Key "renewAfter" (toString $renewAfter) -}}
{{- end -}}
{{- $_ := set $leaf "ca" $ca.crt -}}
{{- $_ := set $leaf "names" $names -}}
{{- $_ := set $leaf "secret" $c.secret -}}
{{- $_ := set $leaves $id $leaf -}}
{{- end -}}
{{- $_ := set $out "leaves" $leaves -}}
{{- $_ := set .Values "__ichorGeneratedTLS" $out -}}
{{- end -}}
{{- end }}

{{/* The PEM CA bundle the APIService trusts, in generate and secrets modes. */}}
{{- define "ichor.apiserverCABundle" -}}
{{- $mode := include "ichor.tlsMode" . -}}
{{- if eq $mode "generate" -}}
{{- include "ichor.generatedTLS" . -}}
{{- (get .Values.__ichorGeneratedTLS.cas "ichor-ca").crt -}}
{{- else if eq $mode "secrets" -}}
{{- .Values.tls.caBundle -}}
{{- end -}}
{{- end }}

{{/*
A checksum of a component's certificates, for its pod template: a new
certificate restarts the pods that serve it. ichor.tlsChecksum (dict "ids" (list "apiserver" "controller") "root" $).
*/}}
{{- define "ichor.tlsChecksum" -}}
{{- $root := .root -}}
{{- if eq (include "ichor.tlsMode" $root) "generate" -}}
{{- include "ichor.generatedTLS" $root -}}
{{- $sum := list -}}
{{- range $id := .ids -}}
{{- $leaf := get $root.Values.__ichorGeneratedTLS.leaves $id -}}
{{- if $leaf }}{{ $sum = append $sum $leaf.crt }}{{ end -}}
{{- end -}}
{{- $sum | join "" | sha256sum -}}
{{- end -}}
{{- end }}
