# 3. A Hugging Face token for the engines and the pairing check (gated models need one).
kubectl create secret generic hf-token --from-literal=token=hf_YOUR_TOKEN

# 4. The pair, on one H100 80GB (h100-80gb; other products: docs/gpu-planning.md).
kubectl apply -f - <<'YAML'
apiVersion: specdeploy.io/v1alpha1
kind: SpeculativeDeployment
metadata:
  name: qwen3-30b-a3b-eagle3
spec:
  verifier:
    model: Qwen/Qwen3-30B-A3B-Instruct-2507
  speculator:
    model: RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3
    numSpeculativeTokens: 3
  parallelism:
    gpuProduct: h100-80gb
  modelAccess:
    tokenSecretRef:
      name: hf-token
YAML

# 5. Wait for the download, the load and the first health check (10-30 minutes cold).
kubectl wait sdep/qwen3-30b-a3b-eagle3 --for=condition=Ready --timeout=60m

# 6. Chat with it.
kubectl port-forward svc/qwen3-30b-a3b-eagle3 8000:8000 &
curl -s localhost:8000/v1/chat/completions -H 'Content-Type: application/json' \
  -d '{"model": "Qwen/Qwen3-30B-A3B-Instruct-2507", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 64}'
