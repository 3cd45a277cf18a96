// ftfleet's driver of FasterTransformer's own model classes, the ones fastertransformer_backend
// serves with (src/fastertransformer/triton_backend/*): it builds the model from a shard
// directory's config.ini exactly as the backend's libfastertransformer.cc does (model type,
// tensor-parallel size, the directory), creates one instance per GPU, runs one request and
// prints what came back as JSON. Built inside FT's tree by scripts/ft-gpu-check.
//
//   ftfleet_ft_driver MODEL_TYPE DATA_TYPE TP MODEL_DIR REQUEST
//
// MODEL_TYPE: GPT (GPT-2, BLOOM and the other ParallelGpt variants), GPT-J, GPT-NeoX, and Llama in
// a build of void-main's fork (its libfastertransformer.cc's name); DATA_TYPE:
// fp32 or fp16; REQUEST: a text file, one input tensor per line, as the backend receives them:
//   NAME TYPE DIM... : VALUE...      (TYPE: uint32 int32 uint64 fp32 bool; DIM: the shape)
// for example "input_ids uint32 1 5 : 10 20 30 40 50".

#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "src/fastertransformer/triton_backend/gptj/GptJTritonModel.h"
#include "src/fastertransformer/triton_backend/gptneox/GptNeoXTritonModel.h"
#include "src/fastertransformer/triton_backend/multi_gpu_gpt/ParallelGptTritonModel.h"
#include "src/fastertransformer/triton_backend/transformer_triton_backend.hpp"
#ifdef FTFLEET_LLAMA  // a tree with void-main's LLaMA model (tests/gpu/CMakeLists.txt finds it)
#include "src/fastertransformer/triton_backend/llama/LlamaTritonModel.h"
#endif

namespace {

struct Input {
    std::string         name;
    triton::DataType    type;
    std::vector<size_t> shape;
    std::vector<char>   bytes;
};

triton::DataType parse_type(const std::string& word, size_t* width)
{
    if (word == "uint32") { *width = 4; return triton::TYPE_UINT32; }
    if (word == "int32") { *width = 4; return triton::TYPE_INT32; }
    if (word == "uint64") { *width = 8; return triton::TYPE_UINT64; }
    if (word == "fp32") { *width = 4; return triton::TYPE_FP32; }
    if (word == "bool") { *width = 1; return triton::TYPE_BOOL; }
    throw std::runtime_error("unknown input type " + word);
}

std::vector<Input> read_request(const std::string& path)
{
    std::ifstream      file(path);
    std::vector<Input> inputs;
    std::string        line;
    while (std::getline(file, line)) {
        if (line.empty()) continue;
        std::istringstream words(line);
        Input              input;
        std::string        type, word;
        size_t             width = 0;
        words >> input.name >> type;
        input.type = parse_type(type, &width);
        while (words >> word && word != ":") input.shape.push_back(std::stoul(word));
        while (words >> word) {
            char value[8] = {0};
            if (input.type == triton::TYPE_UINT32) { uint32_t v = std::stoul(word); std::memcpy(value, &v, 4); }
            else if (input.type == triton::TYPE_INT32) { int32_t v = std::stol(word); std::memcpy(value, &v, 4); }
            else if (input.type == triton::TYPE_UINT64) { uint64_t v = std::stoull(word); std::memcpy(value, &v, 8); }
            else if (input.type == triton::TYPE_FP32) { float v = std::stof(word); std::memcpy(value, &v, 4); }
            else { value[0] = (word == "1" || word == "true") ? 1 : 0; }
            input.bytes.insert(input.bytes.end(), value, value + width);
        }
        inputs.push_back(input);
    }
    return inputs;
}

template<typename T>
std::shared_ptr<AbstractTransformerModel> create(const std::string& model_type, size_t tp, const std::string& dir)
{
    // libfastertransformer.cc's choice by the model's `model_type` parameter; pipeline size 1,
    // no custom all-reduce, no int8 (the project's defaults; only GPT takes an int8 mode).
    if (model_type == "GPT") return std::make_shared<ParallelGptTritonModel<T>>(tp, 1, 0, dir, 0);
    if (model_type == "GPT-J") return std::make_shared<GptJTritonModel<T>>(tp, 1, 0, dir);
    if (model_type == "GPT-NeoX") return std::make_shared<GptNeoXTritonModel<T>>(tp, 1, 0, dir);
#ifdef FTFLEET_LLAMA
    if (model_type == "Llama") return std::make_shared<LlamaTritonModel<T>>(tp, 1, 0, dir, 0);
#endif
    throw std::runtime_error("unknown model type " + model_type);
}

// An output tensor as JSON: {"shape": [...], "values": [...]}, copied from the GPU when it is there.
std::string to_json(const triton::Tensor& tensor)
{
    size_t count = 1;
    for (size_t dim : tensor.shape) count *= dim;
    size_t width = tensor.type == triton::TYPE_BOOL ? 1 : (tensor.type == triton::TYPE_UINT64 ? 8 : 4);
    std::vector<char> host(count * width);
    if (tensor.where == triton::MEMORY_GPU) {
        cudaMemcpy(host.data(), tensor.data, host.size(), cudaMemcpyDeviceToHost);
    }
    else {
        std::memcpy(host.data(), tensor.data, host.size());
    }
    std::ostringstream out;
    out << "{\"shape\": [";
    for (size_t i = 0; i < tensor.shape.size(); i++) out << (i ? ", " : "") << tensor.shape[i];
    out << "], \"values\": [";
    out.precision(9);
    for (size_t i = 0; i < count; i++) {
        out << (i ? ", " : "");
        const char* at = host.data() + i * width;
        if (tensor.type == triton::TYPE_FP32) out << *reinterpret_cast<const float*>(at);
        else if (tensor.type == triton::TYPE_INT32) out << *reinterpret_cast<const int32_t*>(at);
        else if (tensor.type == triton::TYPE_UINT32) out << *reinterpret_cast<const uint32_t*>(at);
        else if (tensor.type == triton::TYPE_BOOL) out << (at[0] ? "true" : "false");
        else out << *reinterpret_cast<const uint64_t*>(at);
    }
    out << "]}";
    return out.str();
}

template<typename T>
int run(const std::string& model_type, size_t tp, const std::string& dir, const std::vector<Input>& request)
{
    std::shared_ptr<AbstractTransformerModel> model = create<T>(model_type, tp, dir);
    std::cerr << model->toString();
    // As the backend: the NCCL communicators of the node, the custom all-reduce slots, then per
    // GPU (one thread each) its shared weights and its instance, and one forward per GPU.
    auto nccl_params = model->createNcclParams(0);
    std::vector<std::shared_ptr<fastertransformer::AbstractCustomComm>> custom_comms;
    model->createCustomComms(&custom_comms, tp);
    std::vector<std::unique_ptr<AbstractTransformerModelInstance>> instances(tp);
    std::vector<std::thread>                                           threads;
    for (size_t rank = 0; rank < tp; rank++) {
        threads.emplace_back([&, rank]() {
            cudaSetDevice(rank);
            cudaStream_t stream;
            cudaStreamCreate(&stream);
            model->createSharedWeights(rank, rank);
            instances[rank] = model->createModelInstance(rank, rank, stream, nccl_params, custom_comms[rank]);
        });
    }
    for (auto& thread : threads) thread.join();
    threads.clear();
    std::vector<std::shared_ptr<std::unordered_map<std::string, triton::Tensor>>> outputs(tp);
    for (size_t rank = 0; rank < tp; rank++) {
        threads.emplace_back([&, rank]() {
            cudaSetDevice(rank);
            auto inputs = std::make_shared<std::unordered_map<std::string, triton::Tensor>>();
            for (const Input& input : request) {
                inputs->insert({input.name,
                                triton::Tensor{triton::MEMORY_CPU, input.type, input.shape, input.bytes.data()}});
            }
            outputs[rank] = instances[rank]->forward(inputs);
            cudaDeviceSynchronize();
        });
    }
    for (auto& thread : threads) thread.join();
    // Rank 0's answer, as the backend returns it.
    std::cout << "{";
    bool first = true;
    for (const char* name : {"output_ids", "sequence_length", "cum_log_probs", "output_log_probs"}) {
        if (outputs[0]->count(name) == 0) continue;
        std::cout << (first ? "" : ", ") << "\"" << name << "\": " << to_json(outputs[0]->at(name));
        first = false;
    }
    std::cout << "}" << std::endl;
    return 0;
}

}  // namespace

int main(int argc, char** argv)
{
    if (argc != 6) {
        std::cerr << "usage: ftfleet_ft_driver MODEL_TYPE fp32|fp16 TP MODEL_DIR REQUEST\n";
        return 64;
    }
    const std::string  model_type = argv[1], data_type = argv[2], dir = argv[4];
    const size_t       tp      = std::stoul(argv[3]);
    std::vector<Input> request = read_request(argv[5]);
#ifdef BUILD_MULTI_GPU
    // One process for the node, as the backend: createNcclParams broadcasts the NCCL ids over MPI.
    fastertransformer::mpi::initialize(&argc, &argv);
#endif
    int code = 64;
    if (data_type == "fp32") code = run<float>(model_type, tp, dir, request);
    else if (data_type == "fp16") code = run<half>(model_type, tp, dir, request);
    else std::cerr << "unknown data type " << data_type << "\n";
#ifdef BUILD_MULTI_GPU
    fastertransformer::mpi::finalize();
#endif
    return code;
}
